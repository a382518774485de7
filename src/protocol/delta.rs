//! Incremental (delta) streams: Incremental ADS (`DeltaAggregatedResources`) and the
//! per-type `Delta*` methods (P17..P24), with TTLs and heartbeats (P25).
//!
//! Per type the stream keeps what the client holds as name -> version (`held`), and the
//! snapshot that map was last reconciled with (`basis`). On a new snapshot it asks the cache
//! for the names that changed since `basis` ([`TypeSnapshot::changes_since`], computed once
//! per node group and shared), so building a response costs what changed, not the size of
//! the type. Subscription changes mark names `dirty`; only a newly added wildcard looks at
//! the whole type. A client that holds exactly what its subscription covers of `basis` (a
//! fleet's proxies, between pushes) is kept as just that (`held::Holding`'s given form): a
//! push then sends it the covered changes without looking each up in what it holds, as the
//! one list the streams subscribing to the same names share ([`DeltaResources::Shared`]),
//! and so the endpoints those clusters warm with (P28).
//!
//! The delta flavor of the stream core (`protocol::stream`): the core keeps nonces, ACK/NACK
//! and the make-before-break plan; responses are built from the snapshot the plan says to
//! serve.
//!
//! As in SotW, at most one response per type is in flight: the next goes out once the client
//! ACKs or NACKs it. Changes meanwhile accumulate and go out together. Time enters only as
//! an argument (`now`), for heartbeats: [`DeltaStream::poll_timeout`] says when to call
//! [`DeltaStream::poll_response`] again.
//!
//! Must not: do IO or read a clock, or keep what the core keeps (nonces, ACK/NACK, the plan).

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::service::discovery::v3::DeltaDiscoveryRequest;

use super::per_type::{empty, PerType};
use super::plan::Previous;
use super::stream::{Core, Flavor, Stream};
use super::{heartbeat_interval, Event, Subscription, SyncState, UnknownNames, UnknownRequest};
use crate::cache::{Listed, Snapshot, TypeSnapshot};
use crate::resource::{namespace_of, xdstp, Reference, Resource, ResourceType};
use held::{Before, GivenBefore, Held, HeldRef, HeldSet, Holding};

/// One resource in a delta response.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeltaResource {
    /// Written from its shared bytes; for a heartbeat only its name and version go out.
    pub resource: Arc<Resource>,
    /// The aliases the client subscribed to it by (P24).
    pub aliases: Vec<String>,
    /// `Resource.ttl`, only for clients that support TTLs (P25, P27).
    pub ttl: Option<Duration>,
    /// Whether the resource's body goes out. Without it: a heartbeat (same version, refreshes
    /// the TTL only, P25), or a VHDS alias nothing answers to (see `unresolved_alias`).
    pub body: bool,
}

/// How a VHDS alias that names no virtual host is answered: a `Resource` named by the alias,
/// listing it in `aliases`, without a body. Envoy's on-demand VHDS waits for exactly that (it
/// then answers the request with a 404); a name in `removed_resources` would leave the request
/// hanging. The upstream protocol, not the P20 digest, governs here.
pub fn unresolved_alias(alias: &str, version: &str) -> DeltaResource {
    DeltaResource {
        resource: Arc::new(
            Resource::new(ResourceType::VirtualHost, alias, version, Vec::new(), None)
                .with_aliases(vec![alias.to_string()]),
        ),
        aliases: vec![alias.to_string()],
        ttl: None,
        body: false,
    }
}

/// The resources of a delta response: each as this client gets it, or one list shared by
/// the streams sent exactly the same changes, each resource as the snapshot has it (no
/// alias, no TTL, with its body). Either reads as a slice of [`DeltaResource`]; a shared
/// list is spelled out so on the first look, which the wire never takes (it writes the list
/// as it is, [`DeltaResources::shared`]).
#[derive(Clone, Debug)]
pub enum DeltaResources {
    Each(Vec<DeltaResource>),
    Shared {
        list: Arc<[Arc<Resource>]>,
        each: OnceLock<Vec<DeltaResource>>,
    },
}

impl DeltaResources {
    /// `list`, shared: each resource as the snapshot has it.
    pub fn shared(list: Arc<[Arc<Resource>]>) -> DeltaResources {
        DeltaResources::Shared {
            list,
            each: OnceLock::new(),
        }
    }

    /// The list shared with other streams, if these are one.
    pub fn as_shared(&self) -> Option<&Arc<[Arc<Resource>]>> {
        match self {
            DeltaResources::Each(_) => None,
            DeltaResources::Shared { list, .. } => Some(list),
        }
    }

    /// How many, without spelling a shared list out.
    pub fn len(&self) -> usize {
        match self {
            DeltaResources::Each(each) => each.len(),
            DeltaResources::Shared { list, .. } => list.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Each as this client gets it (a shared list spelled out).
    pub fn into_each(self) -> Vec<DeltaResource> {
        match self {
            DeltaResources::Each(each) => each,
            shared => shared.to_vec(),
        }
    }
}

impl std::ops::Deref for DeltaResources {
    type Target = [DeltaResource];

    fn deref(&self) -> &[DeltaResource] {
        match self {
            DeltaResources::Each(each) => each,
            DeltaResources::Shared { list, each } => each.get_or_init(|| {
                list.iter()
                    .map(|r| DeltaResource {
                        resource: Arc::clone(r),
                        aliases: Vec::new(),
                        ttl: None,
                        body: true,
                    })
                    .collect()
            }),
        }
    }
}

impl Default for DeltaResources {
    fn default() -> Self {
        DeltaResources::Each(Vec::new())
    }
}

impl From<Vec<DeltaResource>> for DeltaResources {
    fn from(each: Vec<DeltaResource>) -> Self {
        DeltaResources::Each(each)
    }
}

impl FromIterator<DeltaResource> for DeltaResources {
    fn from_iter<I: IntoIterator<Item = DeltaResource>>(iter: I) -> Self {
        DeltaResources::Each(iter.into_iter().collect())
    }
}

impl IntoIterator for DeltaResources {
    type Item = DeltaResource;
    type IntoIter = std::vec::IntoIter<DeltaResource>;

    fn into_iter(self) -> Self::IntoIter {
        self.into_each().into_iter()
    }
}

impl<'a> IntoIterator for &'a DeltaResources {
    type Item = &'a DeltaResource;
    type IntoIter = std::slice::Iter<'a, DeltaResource>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl PartialEq for DeltaResources {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl Eq for DeltaResources {}

impl PartialEq<Vec<DeltaResource>> for DeltaResources {
    fn eq(&self, other: &Vec<DeltaResource>) -> bool {
        **self == **other
    }
}

/// A delta response to send.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeltaResponse {
    pub kind: ResourceType,
    /// `system_version_info`: the type's version, for debugging only (P19).
    pub system_version: String,
    /// Fresh per response (P2).
    pub nonce: String,
    /// Resources new or changed for this client, in name order, each name once (P12, P19).
    pub resources: DeltaResources,
    /// Names deleted, or subscribed to and not existing (P19, P20, P22).
    pub removed: Vec<String>,
    /// Those of `removed` the client subscribes to by name: each also goes out as a
    /// `ResourceError` `NOT_FOUND` (P32).
    pub not_found: Vec<String>,
}

/// One delta stream: the shared core with the delta flavor. See `protocol::stream` for the
/// call order.
pub type DeltaStream = Stream<Delta>;

/// What a delta stream adds to the core: per type, the subscription and what the client
/// holds (name -> version).
#[derive(Debug, Default)]
pub struct Delta {
    /// Only the types the client asked for are kept.
    types: PerType<TypeState>,
}

/// One type's sub-stream.
#[derive(Debug, Default)]
struct TypeState {
    subscription: Subscription,
    /// Name -> what the client holds (as far as the server knows), or that it holds what
    /// the subscription covers of `basis` (see `Holding`).
    held: Holding,
    /// The snapshot `held` was last reconciled with; names changed since then are looked at
    /// on the next response.
    basis: Option<Arc<TypeSnapshot>>,
    /// Names (as subscribed: resource names, aliases, VHDS namespaces) to look at on the next
    /// response, each with whether to send it even when the client holds its version (P21,
    /// P22, P28).
    dirty: BTreeMap<String, bool>,
    /// Look at every resource: the wildcard was just added.
    full: bool,
    /// Send all the subscription selects: the first request named them, and the client
    /// holds nothing of the type (no wildcard, no alias or glob, nothing claimed). What the
    /// selection is, shared by the streams that name the same names, stands for a look at
    /// each name (`dirty`) on a fleet's first responses.
    fresh: bool,
    /// In the given form (see `Holding`): clusters sent anew whose ClusterLoadAssignments
    /// go again on the next response, if the client holds them (P28), as the responses
    /// that sent them listed them (a shared list kept whole). Name by name, they are
    /// `dirty` instead.
    rewarm: Vec<Arc<[Arc<Resource>]>>,
    /// The first response for a wildcard goes out even when empty, so the client knows the
    /// server has nothing (rather than waiting for its initial fetch to time out).
    announce: bool,
    /// What the client held before the response in flight changed it, to restore on a NACK.
    before: Vec<Before>,
    /// How many names the client listed in `initial_resource_versions` (P23).
    claimed: usize,
    /// Names a response the client rejected changed or removed: they go again (sent, or
    /// removed) with the type's next change. A removal it may or may not have applied; a
    /// change it did not, and the next change may take the name back to the version it kept
    /// (an edit undone): sent all the same, so that the client's answer ends the NACK (P5).
    /// Boxed: almost always empty.
    #[allow(clippy::box_collection)]
    again: Option<Box<Vec<String>>>,
    /// TTL'd resources the client holds: name -> when their next heartbeat is due (P25).
    heartbeats: Heartbeats,
}

empty!(TypeState);

// Within jemalloc's 224-byte class (see [`Heartbeats`]): each type a client asks for boxes
// one.
const _: () = assert!(std::mem::size_of::<TypeState>() <= 224);

/// TTL'd resources a client holds, name -> when their next heartbeat is due (P25), behind
/// one pointer when there are any: few resources have a TTL, and every delta stream keeps
/// this per type. 8 bytes where a `BTreeMap` takes 24 put [`TypeState`] in jemalloc's
/// 224-byte class, from 256 (docs/benchmarks.md, "The stream task's memory and the
/// convergence count").
#[derive(Debug, Default)]
#[allow(clippy::box_collection)] // 8 bytes where the map takes 24: the point of the type.
struct Heartbeats(Option<Box<BTreeMap<String, Instant>>>);

impl Heartbeats {
    fn is_empty(&self) -> bool {
        self.0.as_ref().is_none_or(|m| m.is_empty())
    }

    fn contains_key(&self, name: &str) -> bool {
        self.0.as_ref().is_some_and(|m| m.contains_key(name))
    }

    fn insert(&mut self, name: String, due: Instant) {
        self.0.get_or_insert_default().insert(name, due);
    }

    /// None left frees the map.
    fn remove(&mut self, name: &str) {
        if let Some(map) = &mut self.0 {
            map.remove(name);
            if map.is_empty() {
                self.0 = None;
            }
        }
    }

    /// Keeps those `keep` says to; none left frees the map.
    fn retain(&mut self, keep: impl FnMut(&String, &mut Instant) -> bool) {
        if let Some(map) = &mut self.0 {
            map.retain(keep);
            if map.is_empty() {
                self.0 = None;
            }
        }
    }

    fn iter(&self) -> impl Iterator<Item = (&String, &Instant)> {
        self.0.iter().flat_map(|m| m.iter())
    }

    fn values(&self) -> impl Iterator<Item = &Instant> {
        self.iter().map(|(_, due)| due)
    }
}

impl TypeState {
    /// What the client holds, name by name (made so if it was given; see `Holding`).
    fn names(&mut self) -> &mut HeldSet {
        let (set, undo) = self.held.names(&self.subscription);
        if let Some(undo) = undo {
            self.before = undo;
        }
        for cluster in std::mem::take(&mut self.rewarm)
            .iter()
            .flat_map(|l| l.iter())
        {
            if let Some(cla) = &cluster.warms_with {
                if set.get(cla).is_some() {
                    self.dirty.insert(cla.clone(), true);
                }
            }
        }
        set
    }

    /// Whether the next response can be built from the given form: the client holds what
    /// the subscription covers of `basis`, and nothing but the snapshot's changes since and
    /// `rewarm` is to look at (no name to look at again, no wildcard just added, no TTL to
    /// refresh, nothing rejected to send again).
    fn answers_given(&self, rejected: bool) -> bool {
        let at_basis = match (self.held.given(), &self.basis) {
            (Some(given), Some(basis)) => Arc::ptr_eq(given, basis),
            _ => false,
        };
        at_basis && !rejected && self.dirty.is_empty() && !self.full && self.heartbeats.is_empty()
    }

    /// Whether `send` (settled) is exactly what the subscription selects of `current`, to a
    /// client that holds nothing yet: after it, the client holds what the subscription
    /// covers of `current` (see `Holding`).
    fn sends_its_selection(
        &self,
        kind: ResourceType,
        current: &Arc<TypeSnapshot>,
        send: &[(&Arc<Resource>, Why)],
    ) -> bool {
        if kind == ResourceType::VirtualHost || self.held.by_name().is_none_or(|s| s.len() > 0) {
            return false;
        }
        let selected = self.subscription.select(current);
        selected.resources.len() == send.len()
            && selected
                .resources
                .iter()
                .zip(send)
                .all(|(s, (r, why))| *why == Why::Send && Arc::ptr_eq(s, r))
    }

    /// After an ACK (with nothing rejected): if the client holds exactly what its
    /// subscription covers of `basis`, keep only that (see `Holding`). One lookup per name
    /// held, once: a stream stays in the given form from push to push.
    fn try_give(&mut self, kind: ResourceType) {
        if kind == ResourceType::VirtualHost
            || !self.dirty.is_empty()
            || self.full
            || !self.heartbeats.is_empty()
            || !self.before.is_empty()
            || !self.rewarm.is_empty()
        {
            return;
        }
        let (Some(basis), Some(set)) = (&self.basis, self.held.by_name()) else {
            return;
        };
        if set.has_claims() {
            return;
        }
        let selected = self.subscription.select(basis);
        let exactly = set.len() == selected.resources.len()
            && selected
                .resources
                .iter()
                .all(|r| set.get(&r.name).is_some_and(|h| h.version() == r.version));
        if exactly {
            let basis = Arc::clone(basis);
            self.held.give(&basis, None);
        }
    }

    /// The client holds `resource` unchanged from before this stream (P23), so it is not sent
    /// again; if it has a TTL, the client's clock for it has been running since then, so a
    /// heartbeat goes out now rather than a third of the TTL from now (P25).
    fn refresh_soon(&mut self, resource: &Resource, now: Instant) {
        if resource.ttl.is_some() && !self.heartbeats.contains_key(&resource.name) {
            self.heartbeats.insert(resource.name.clone(), now);
        }
    }

    /// The client holds `resource` at the version it claimed on reconnecting (P23): keep it
    /// as if sent, sharing the snapshot's resource instead of the claimed name and version
    /// (a proxy back after a restart would otherwise keep a copy of every name it holds).
    fn confirm(&mut self, resource: &Arc<Resource>) {
        let claimed = matches!(
            self.held.get(&self.subscription, &resource.name),
            Some(HeldRef::Claimed { .. })
        );
        if claimed {
            self.names().replace(Held::Sent(Arc::clone(resource)));
        }
    }

    /// Record that the client now holds `resource`, remembering the former value for a NACK.
    fn hold(&mut self, resource: &Arc<Resource>, before: &mut Vec<Before>) {
        before.push(
            match self.names().replace(Held::Sent(Arc::clone(resource))) {
                None => Before::Nothing(Arc::clone(resource)),
                Some(old) => Before::Held(old),
            },
        );
    }

    /// Record that the client no longer holds `name`, remembering the former value.
    fn release(&mut self, name: &str, before: &mut Vec<Before>) {
        self.heartbeats.remove(name);
        if let Some(old) = self.names().take(name) {
            before.push(Before::Released(old));
        }
    }

    /// What the response in flight (whose `before` this is) brought the client, each with
    /// what it had of that name before: what it added or changed (not what it removed).
    fn brought(&self, before: &[Before]) -> Vec<(Arc<Resource>, Previous)> {
        before
            .iter()
            .filter_map(|b| {
                let (name, previous) = match b {
                    Before::Nothing(r) => (r.name.as_str(), Previous::Nothing),
                    Before::Held(Held::Sent(r)) => (r.name.as_str(), Previous::Had(Arc::clone(r))),
                    Before::Held(h @ Held::Claimed(_)) => (h.name(), Previous::Unknown),
                    Before::Released(_) => return None,
                };
                match self.held.get(&self.subscription, name)? {
                    HeldRef::Sent(now) => Some((Arc::clone(now), previous)),
                    HeldRef::Claimed { .. } => None,
                }
            })
            .collect()
    }

    /// A NACK: the client keeps what it had before the rejected response.
    /// What the client holds, with each resource's content (`None` when it holds a name
    /// it only claimed on reconnecting, whose content the server does not have).
    fn runs(&self) -> Option<super::Runs> {
        let mut resources = Vec::new();
        for held in self.held.iter(&self.subscription) {
            match held {
                held::HeldRef::Sent(r) => resources.push(Arc::clone(r)),
                held::HeldRef::Claimed { .. } => return None,
            }
        }
        resources.sort_by(|a, b| a.name.cmp(&b.name));
        Some(super::Runs {
            resources,
            subscription: self.subscription.clone(),
        })
    }

    fn restore(&mut self, before: Vec<Before>) {
        for b in before.into_iter().rev() {
            match b {
                Before::Nothing(r) => {
                    self.heartbeats.remove(&r.name);
                    self.names().remove(r.name.as_str());
                }
                // It kept what it had; with the type's next change (P5) the name goes again,
                // even back at the version it kept (see `again`).
                Before::Held(old) => {
                    self.again
                        .get_or_insert_default()
                        .push(old.name().to_string());
                    self.names().replace(old);
                }
                // A client that NACKs may have applied the response's removals (Envoy
                // does) or not (a client that rejects the whole response): with the type's
                // next change (P5) the name goes again, sent if it exists, else removed
                // again (harmless if the client had removed it).
                Before::Released(old) => {
                    self.again
                        .get_or_insert_default()
                        .push(old.name().to_string());
                    self.names().replace(old);
                }
            }
        }
    }

    /// Forget resources the subscription no longer covers (the client drops them itself).
    fn forget_uncovered(&mut self, current: &TypeSnapshot) {
        // Made name by name first (with what that carries over); then the set is taken
        // again apart from the subscription, which the filter reads.
        self.names();
        let subscription = &self.subscription;
        let (set, _) = self.held.names(subscription);
        set.retain(|held| match current.resources.get(held.name()) {
            Some(r) => subscription.covers_resource(r),
            None => match held {
                HeldRef::Sent(r) => subscription.covers_resource(r),
                HeldRef::Claimed { name, .. } => subscription.covers(name),
            },
        });
        let held = &self.held;
        self.heartbeats
            .retain(|name, _| held.contains(subscription, name));
    }
}

impl DeltaStream {
    /// The resources of `kind` the client runs, as name -> version, in name order. After a
    /// NACK these are the versions it kept, not the rejected ones (P17).
    pub fn held(&self, kind: ResourceType) -> BTreeMap<&str, &str> {
        let st = &self.flavor().types[kind];
        st.held
            .iter(&st.subscription)
            .into_iter()
            .map(|h| (h.name(), h.version()))
            .collect()
    }

    /// Whether the stream keeps what the client holds of `kind` as the snapshot it was given
    /// (see `Holding`), not name by name.
    #[cfg(test)]
    pub(crate) fn given(&self, kind: ResourceType) -> bool {
        self.flavor().types[kind].held.given().is_some()
    }

    /// How many resources of `kind` the stream knows of only by the client's claim (P23),
    /// as copies of their names and versions.
    #[cfg(test)]
    pub(crate) fn claimed(&self, kind: ResourceType) -> usize {
        let st = &self.flavor().types[kind];
        st.held
            .iter(&st.subscription)
            .into_iter()
            .filter(|h| matches!(h, HeldRef::Claimed { .. }))
            .count()
    }
}

impl Flavor for Delta {
    type Request = DeltaDiscoveryRequest;
    type Response = DeltaResponse;

    fn type_url(request: &DeltaDiscoveryRequest) -> &str {
        &request.type_url
    }

    fn take_node(request: &mut DeltaDiscoveryRequest) -> Option<Node> {
        request.node.take()
    }

    fn unknown_request(request: &DeltaDiscoveryRequest) -> UnknownRequest<'_> {
        UnknownRequest {
            nonce: &request.response_nonce,
            error: request.error_detail.as_ref().map(|e| e.message.as_str()),
            version: "",
            names: UnknownNames::Delta {
                subscribe: &request.resource_names_subscribe,
                unsubscribe: &request.resource_names_unsubscribe,
            },
        }
    }

    /// One function on purpose, as [`Delta::respond_type`]: a delta request is read in the
    /// order its fields apply (P17: the nonce, then the ACK or NACK; P18, P21, P22: the
    /// subscribes and unsubscribes, taken whatever the nonce; P23: the versions a client
    /// back on a new stream holds), each against the same type's state.
    fn handle_request(
        &mut self,
        core: &mut Core,
        kind: ResourceType,
        first: bool,
        request: DeltaDiscoveryRequest,
    ) {
        let current = core.target(kind).map(Arc::clone);
        let st = &mut self.types[kind];
        // What the client holds is changed name by name by a change of its subscription
        // (see `Holding`).
        if first
            || !request.resource_names_subscribe.is_empty()
            || !request.resource_names_unsubscribe.is_empty()
        {
            st.names();
        }

        // P17: an ACK or NACK of a response; P18: a stale nonce only loses its ACK meaning.
        let mut acked = false;
        if !request.response_nonce.is_empty() {
            let nonce = request.response_nonce;
            if core.in_flight(kind) && core.latest_nonce(kind) == Some(nonce.as_str()) {
                let version = core.state(kind).sent_version().unwrap_or("").to_string();
                // What the response brought is needed name by name for a NACK, or for an
                // ACK of what the client had rejected.
                if request.error_detail.is_some() || core.has_rejected(kind) {
                    st.names();
                }
                st.held.settle();
                let before = std::mem::take(&mut st.before);
                match request.error_detail {
                    Some(status) => {
                        let brought = st.brought(&before);
                        st.restore(before);
                        let accepted = core.acked_version(kind).to_string();
                        let runs = st.runs();
                        core.nack(
                            kind,
                            nonce,
                            version,
                            accepted,
                            status.message,
                            brought,
                            runs,
                        );
                    }
                    None => {
                        let accepted = if core.has_rejected(kind) {
                            st.brought(&before)
                                .into_iter()
                                .map(|(r, _)| (r.name.clone(), r.version.clone()))
                                .collect()
                        } else {
                            Vec::new()
                        };
                        core.ack(kind, version, accepted);
                        acked = true;
                    }
                }
            } else {
                core.event(Event::Stale { kind, nonce });
            }
        }

        // P23: what the client kept from an earlier stream; not sent again if unchanged.
        let mut claimed = HashSet::new();
        if first {
            st.claimed = request.initial_resource_versions.len();
            if st.claimed > 0 {
                core.claim(kind);
            }
            for (name, version) in request.initial_resource_versions {
                let name = crate::resource::xdstp::canonical(&name).into_owned();
                st.dirty.entry(name.clone()).or_insert(false);
                claimed.insert(name.clone());
                st.names().replace(Held::Claimed(Box::new((name, version))));
            }
        }
        let change = st.subscription.apply_delta(
            first,
            &request.resource_names_subscribe,
            &request.resource_names_unsubscribe,
        );
        if change.wildcard_added {
            st.full = true;
            // A client back with what it had (P23) is past its initial fetch: nothing to
            // announce, and an empty response would only count as an update.
            st.announce |= first && st.claimed == 0;
        }
        // P21: named in subscribe, so sent even if the client seems to have it; except what
        // it has just told us it holds (P23). A first request naming names only, from a
        // client that holds nothing: all the subscription selects goes (`fresh`).
        let fresh = first
            && claimed.is_empty()
            && !matches!(kind, ResourceType::VirtualHost | ResourceType::LbEndpoint)
            && !st.subscription.is_wildcard()
            && !st.subscription.has_globs()
            && change.resubscribed.is_empty()
            && st.held.by_name().is_some_and(|held| held.len() == 0);
        if fresh {
            st.fresh = true;
        } else {
            for name in change.subscribed.iter().chain(&change.resubscribed) {
                let forced = !claimed.contains(name);
                *st.dirty.entry(name.clone()).or_default() |= forced;
            }
        }
        let empty = TypeSnapshot::default();
        let current = current.as_deref().unwrap_or(&empty);
        if change.wildcard_dropped {
            st.full = false;
            st.forget_uncovered(current);
        }
        for name in &change.unsubscribed {
            if st.subscription.is_wildcard() {
                // P22: still covered by the wildcard, or reported removed; either way the
                // client hears about it again.
                st.names().remove(name.as_str());
                st.dirty.insert(name.clone(), true);
            } else {
                st.dirty.remove(name);
            }
            core.record_found(kind, name);
        }
        if !change.unsubscribed.is_empty() && !st.subscription.is_wildcard() {
            st.forget_uncovered(current);
        }
        if change.wildcard_added
            || change.wildcard_dropped
            || !change.subscribed.is_empty()
            || !change.unsubscribed.is_empty()
        {
            core.event(Event::Subscribed {
                kind,
                wildcard: st.subscription.is_wildcard(),
                subscribed: change.subscribed,
                unsubscribed: change.unsubscribed,
            });
        }
        if acked && !core.has_rejected(kind) {
            st.try_give(kind);
        }
    }

    fn respond(
        &mut self,
        core: &mut Core,
        kind: ResourceType,
        target: &Arc<TypeSnapshot>,
        now: Instant,
    ) -> Option<DeltaResponse> {
        self.respond_type(core, kind, target, now)
    }

    /// When the next heartbeat is due, if any. A type with a response in flight has none: its
    /// ACK or NACK is the next input anyway.
    fn poll_timeout(&self, core: &Core) -> Option<Instant> {
        ResourceType::ALL
            .iter()
            .filter(|&&kind| !core.in_flight(kind))
            .filter_map(|&kind| self.types[kind].heartbeats.values().min())
            .min()
            .copied()
    }

    fn references(&self, kind: ResourceType) -> BTreeSet<Reference> {
        let st = &self.types[kind];
        st.held
            .iter(&st.subscription)
            .into_iter()
            .filter_map(|h| match h {
                HeldRef::Sent(r) => Some(r.references.iter().cloned()),
                HeldRef::Claimed { .. } => None,
            })
            .flatten()
            .collect()
    }

    /// Names subscribed, and names the client claimed on reconnecting (P23): both are the
    /// client's to choose, and kept per stream.
    fn subscribed_names(&self) -> usize {
        self.types
            .iter()
            .map(|t| t.subscription.names().len() + t.claimed)
            .sum()
    }

    /// P23: the names and versions the client listed, each found in one of `known`
    /// (versions follow content, so any replica serving the same files has them); `None` if
    /// none is. Those not found stay claimed, at versions the server cannot plan from (a
    /// mixture the proxy was left with, say): the rest is still ordered, so that what the
    /// proxy may use of it (a cluster's endpoints) is not removed before what names it.
    fn held_of(&self, kind: ResourceType, known: &[Arc<Snapshot>]) -> Option<Arc<TypeSnapshot>> {
        let st = self.types.get(kind)?;
        let mut resources = BTreeMap::new();
        let mut found_any = false;
        for held in st.held.iter(&st.subscription) {
            let (name, version) = (held.name(), held.version());
            let found = known.iter().find_map(|s| {
                let r = s.get(kind).resources.get(name)?;
                (r.version == version).then_some(r)
            });
            // One claimed at a version none of them has is taken as held at the newest's
            // (what the client gets of it anyway: its version differs), so that no step
            // of the plan made from this leaves it out: over a wildcard that would remove
            // what the client holds and the newest has. Its update waits as any other.
            let known_now = || known.first().and_then(|s| s.get(kind).resources.get(name));
            match (found, known_now()) {
                (Some(found), _) => {
                    found_any = true;
                    resources.insert(name.to_string(), Arc::clone(found));
                }
                (None, Some(now)) => {
                    resources.insert(name.to_string(), Arc::clone(now));
                }
                (None, None) => {}
            }
        }
        found_any.then(|| Arc::new(TypeSnapshot::new(resources)))
    }

    fn subscribes(&self, kind: ResourceType, name: &str) -> bool {
        self.types[kind].subscription.covers(name)
    }

    fn holds(&self, kind: ResourceType, name: &str, version: &str) -> bool {
        let st = &self.types[kind];
        st.held
            .get(&st.subscription, name)
            .is_some_and(|h| h.version() == version)
    }

    /// In the given form (what the subscription covers of one snapshot, kept only while the
    /// subscription does not change), of `snapshot`'s version: each resource of it that the
    /// client subscribes to is held.
    fn holds_all(&self, kind: ResourceType, snapshot: &TypeSnapshot) -> bool {
        self.types[kind]
            .held
            .given()
            .is_some_and(|given| given.version == snapshot.version)
    }
}

impl Delta {
    /// Decide whether `kind` has something to send now to bring the client to `current`,
    /// and build it.
    ///
    /// One function on purpose: it is the state machine's decision for one type, read top
    /// to bottom in the order the rules apply (nothing pending; changes only, P19, and what the
    /// client is to hold mid make-before-break, P30; names that do not exist, P20, or are
    /// no longer covered, P22; aliases, P24; re-warming, P28; TTL heartbeats, P25; the size
    /// split; what is then taken as sent). Each step
    /// reads and narrows what the previous ones decided about the same type's state; split
    /// apart, those would be a dozen arguments passed along, and the order of the rules
    /// would no longer be visible in one place.
    fn respond_type(
        &mut self,
        core: &mut Core,
        kind: ResourceType,
        current: &Arc<TypeSnapshot>,
        now: Instant,
    ) -> Option<DeltaResponse> {
        let ttl_ok = core.features().resource_ttl;
        if !core.requested(kind) || core.in_flight(kind) {
            return None;
        }
        let st = &mut self.types[kind];
        // From the given form, every covered change is new to the client (it holds the
        // basis's versions), and what it holds is not looked up name by name.
        let mut given = st.answers_given(core.has_rejected(kind));
        // Changes to the snapshot since the last look (P19), with their resources, and what
        // the subscription covers of them: looked up once per pair of snapshots (and name
        // set), not per stream.
        let changes = st
            .basis
            .as_ref()
            .map(|basis| current.changed_since(basis))
            .unwrap_or_default();
        let covered = st.subscription.covers_changes(&changes);
        // The given form, and nothing to send but every covered change as the snapshot has
        // it, or but the endpoints one list of clusters sent warms with (P28), and nothing
        // removed, sent again for a rejection, to refresh or to split: the response is one
        // list shared by the streams that send the same (subscribing to the same names),
        // with no resource looked at one by one. What follows would send the same, built
        // for this stream.
        let rewarmed = match (&st.rewarm[..], st.held.given()) {
            ([clusters], Some(held_at)) if given && changes.names.is_empty() => {
                Some(rewarmed(clusters, held_at, &st.subscription, current))
            }
            _ => None,
        };
        let listed = match &rewarmed {
            Some(listed) => Some(&**listed),
            None if st.rewarm.is_empty() && !changes.removes => Some(&covered.listed),
            None => None,
        };
        if let Some(listed) = listed.filter(|listed| {
            given
                && kind != ResourceType::VirtualHost
                && !listed.resources.is_empty()
                && !st.fresh
                && st.again.is_none()
                && !(ttl_ok && listed.ttl)
                && !listed.aliased
                && core.rejected(kind).next().is_none()
        }) {
            if core.fits(kind, listed.cost) {
                st.announce = false;
                st.rewarm.clear();
                st.basis = Some(Arc::clone(current));
                if core.has_not_found(kind) {
                    for r in listed.resources.iter() {
                        core.record_found(kind, &r.name);
                    }
                }
                let nonce = core.send(kind, &current.version);
                let before = st.held.given().map(|was| {
                    Box::new(GivenBefore {
                        snapshot: Arc::clone(was),
                        resent: rewarmed.is_some().then(|| Arc::clone(&listed.resources)),
                    })
                });
                st.held.give(current, before);
                let resources = DeltaResources::shared(Arc::clone(&listed.resources));
                if listed.warms {
                    self.warm_again(kind, &listed.resources);
                }
                return Some(DeltaResponse {
                    kind,
                    system_version: current.version.clone(),
                    nonce,
                    resources,
                    removed: Vec::new(),
                    not_found: Vec::new(),
                });
            }
        }
        if !given {
            st.names();
        }
        // What to send, by how it came (`Why`); one entry per name once settled
        // (`settle`): the first of these that holds. A list sorted once instead of a map
        // (every push inserts each changed name on every stream).
        // What the subscription selects, kept for the response's whole making when `fresh`.
        let selection;
        let mut send: Vec<(&Arc<Resource>, Why)>;
        let mut removed: BTreeSet<String> = BTreeSet::new();
        let mut unresolved: Vec<String> = Vec::new();
        // Names whose removal waits (see `HeldRef::Claimed` below), marked again for later.
        let mut deferred = Vec::new();

        // Room for every change at once (a push sends most of them), not grown step by step.
        send = Vec::with_capacity(changes.names.len());
        {
            let mut covered = covered.flags.iter().copied();
            for (name, found) in changes.names.iter().zip(changes.now.iter()) {
                match found {
                    Some(r) => {
                        if !covered.next().unwrap_or(false) {
                            continue;
                        }
                        if given {
                            send.push((r, Why::Send));
                            continue;
                        }
                        if st.held.get(&st.subscription, name).map(HeldRef::version)
                            != Some(r.version.as_str())
                        {
                            send.push((r, Why::Send));
                        } else {
                            st.confirm(r);
                        }
                    }
                    None => {
                        // Also what the client rejected: Envoy applies the valid part of a
                        // response it NACKs, so it may hold it (removing a name it does not
                        // hold is harmless).
                        let maybe_held = || core.rejected(kind).any(|(n, _)| n == name);
                        let held = st.held.get(&st.subscription, name);
                        if core.newest_has(kind, name) {
                            // Not served by this step, and the newest snapshot has it: a
                            // later step brings it (removing it meanwhile would break
                            // before making).
                            deferred.push((name.clone(), false));
                        } else if matches!(held, Some(HeldRef::Claimed { .. }))
                            && core.defers_removal_of(kind)
                        {
                            // Claimed at a version the server does not keep: as below.
                            deferred.push((name.clone(), false));
                        } else if held.is_some() || maybe_held() {
                            removed.insert(name.clone());
                        }
                    }
                }
            }
        }
        // P28, from the given form: what the client holds of these goes again, as it is now
        // (one it held and that is gone now is among the changes, removed).
        let mut resent = Vec::new();
        // Whether `send` holds only these, in name order and each once.
        let mut resent_only = false;
        if given {
            let rewarm = std::mem::take(&mut st.rewarm);
            if let Some(held_at) = st.held.given().map(Arc::clone) {
                let names = super::rewarm_names(rewarm.iter().flat_map(|l| l.iter()));
                resent_only = send.is_empty();
                for r in resend(&names, &held_at, &st.subscription, current) {
                    send.push((r, Why::Send));
                    resent.push(Arc::clone(r));
                }
            }
        }
        // The names of a first request, the client holding nothing: what the subscription
        // selects (in name order, each once), and what it names that does not exist (P20).
        // As `dirty`'s forced names below, without a look at each.
        let fresh = std::mem::take(&mut st.fresh);
        let mut fresh_only = None;
        if fresh {
            selection = st.subscription.select(current);
            if send.is_empty() {
                fresh_only = Some(selection.resources.len());
            }
            send.extend(selection.resources.iter().map(|r| (r, Why::Send)));
            // A name missing leaves the selection short of the names (no wildcard, no glob
            // here): only then is the snapshot walked for them.
            let missing = if selection.resources.len() < st.subscription.names().len() {
                st.subscription.missing(current)
            } else {
                Vec::new()
            };
            for name in missing {
                if core.newest_has(kind, &name) {
                    deferred.push((name, true));
                } else {
                    removed.insert(name);
                }
            }
        }
        // A wildcard just added: everything the client lacks.
        if std::mem::take(&mut st.full) {
            for r in current.resources.values() {
                let held = st.held.get(&st.subscription, &r.name);
                if held.map(HeldRef::version) != Some(r.version.as_str()) {
                    send.push((r, Why::Send));
                } else {
                    st.confirm(r);
                    if ttl_ok {
                        st.refresh_soon(r, now);
                    }
                }
            }
        }
        // Names subscribed, re-subscribed, unsubscribed under a wildcard, or claimed (P20..P23).
        for (name, forced) in std::mem::take(&mut st.dirty) {
            let found = current.resolve(kind, &name);
            if found.is_empty() {
                // Claimed on reconnecting at a version the server does not keep: the proxy
                // may still route to it; removed once its update is complete.
                let claimed = || {
                    matches!(
                        st.held.get(&st.subscription, &name),
                        Some(HeldRef::Claimed { .. })
                    )
                };
                // Not served by this step, and the newest snapshot has it: a later step
                // brings it (it does exist, P20; removing it meanwhile would break before
                // making, P30).
                if (core.defers_removal_of(kind) && claimed()) || core.newest_has(kind, &name) {
                    deferred.push((name, forced));
                    continue;
                }
                // An alias the client asks for by name that nothing answers to (P24); one
                // it only unsubscribed from under a wildcard is reported removed (P22).
                if kind == ResourceType::VirtualHost
                    && namespace_of(kind, &name).is_some()
                    && !st.held.contains(&st.subscription, &name)
                    && st.subscription.names().contains(&name)
                {
                    unresolved.push(name);
                } else {
                    // P20: subscribed and not there; P19: the client claimed a deleted one.
                    removed.insert(name);
                }
                continue;
            }
            for r in found {
                if !st.subscription.covers_resource(r) {
                    st.names().remove(r.name.as_str());
                    st.heartbeats.remove(&r.name);
                } else if forced
                    || st.held.get(&st.subscription, &r.name).map(HeldRef::version)
                        != Some(r.version.as_str())
                {
                    send.push((r, Why::Send));
                } else {
                    st.confirm(r);
                    if ttl_ok {
                        st.refresh_soon(r, now);
                    }
                }
            }
        }
        st.dirty.extend(deferred);
        // Heartbeats due, for TTL'd resources the client holds unchanged (P25).
        let due: Vec<String> = st
            .heartbeats
            .iter()
            .filter(|(_, at)| **at <= now)
            .map(|(n, _)| n.clone())
            .collect();
        for name in due {
            match current.resources.get(&name) {
                Some(r)
                    if st.held.get(&st.subscription, &name).map(HeldRef::version)
                        == Some(r.version.as_str()) =>
                {
                    send.push((r, Why::Heartbeat));
                }
                // Changed or gone: the diff above sends or removes it.
                _ => {
                    st.heartbeats.remove(&name);
                }
            }
        }
        let type_changed = st
            .basis
            .as_ref()
            .is_none_or(|b| b.version != current.version);
        st.basis = Some(Arc::clone(current));
        if type_changed {
            // What the client rejected goes again with this change (P5), so that what it
            // rejected only for being in the same response as something bad is not lost.
            for (name, version) in core.rejected(kind) {
                if let Some(r) = current.resources.get(name) {
                    if r.version == version && st.subscription.covers_resource(r) {
                        send.push((r, Why::Again));
                    }
                }
            }
            for name in st.again.take().into_iter().flat_map(|names| *names) {
                match current.resources.get(&name) {
                    Some(r) if st.subscription.covers_resource(r) => send.push((r, Why::Again)),
                    Some(_) => {}
                    // Only what the client still asks for: it forgets the rest itself.
                    None if st.subscription.covers(&name) => {
                        removed.insert(name);
                    }
                    None => {}
                }
            }
        }
        let announce = std::mem::take(&mut st.announce);
        if send.is_empty() && removed.is_empty() && unresolved.is_empty() && !announce {
            // P23: a client back on a new stream with exactly what it is to have (another
            // replica's, after a failover) holds the type's current version, as SotW's P13.
            if st.claimed > 0 && *core.state(kind) == SyncState::NotSent {
                core.assume_acked(kind, &current.version);
            }
            return None;
        }
        // From the given form with nothing sent again, `send` is the changes': in name
        // order, each name once.
        // So is a selection sent alone, or the re-sends alone.
        let sorted = fresh_only == Some(send.len()) || (resent_only && send.len() == resent.len());
        if (!given || !resent.is_empty()) && !sorted {
            settle(&mut send);
        }

        // Over the response limit: what fits goes now (removals all, they are names), the
        // rest on the next response, after the client's answer to this one.
        let count = core.fit(kind, send.iter().map(|(r, _)| r.as_ref()), true);
        if given && count < send.len() {
            // Split: the client will hold part of the changes, so name by name.
            st.names();
            given = false;
        }
        // A first response of exactly what the subscription selects leaves the client
        // holding just that: the given form at once, with no set built and then checked.
        let at_once = !given
            && count >= send.len()
            && removed.is_empty()
            && unresolved.is_empty()
            && !core.has_rejected(kind)
            && st.sends_its_selection(kind, current, &send);
        given |= at_once;
        for (r, how) in send.drain(count.min(send.len())..) {
            // A heartbeat left out stays due; a resource goes on the next response.
            if how != Why::Heartbeat {
                st.dirty.insert(r.name.clone(), true);
            }
        }

        let mut before = Vec::with_capacity(send.len() + removed.len());
        let mut resources = Vec::with_capacity(send.len());
        let mut warming = Vec::new();
        for (r, how) in send {
            let heartbeat = how == Why::Heartbeat;
            if !removed.is_empty() {
                removed.remove(&r.name);
            }
            let ttl = r.ttl.filter(|_| ttl_ok);
            match ttl {
                Some(ttl) => {
                    st.heartbeats
                        .insert(r.name.clone(), now + heartbeat_interval(ttl));
                }
                None if !st.heartbeats.is_empty() => {
                    st.heartbeats.remove(&r.name);
                }
                None => {}
            }
            if !heartbeat {
                if !given {
                    st.hold(r, &mut before);
                }
                if r.warms_with.is_some() {
                    warming.push(Arc::clone(r));
                }
            }
            resources.push(DeltaResource {
                resource: Arc::clone(r),
                aliases: st.subscription.aliases_of(r),
                ttl,
                body: !heartbeat,
            });
        }
        resources.extend(
            unresolved
                .iter()
                .map(|alias| unresolved_alias(alias, &current.version)),
        );
        for name in &removed {
            if given {
                st.heartbeats.remove(name);
            } else {
                st.release(name, &mut before);
            }
        }
        // P32: what the client names and does not exist (not what only its wildcard took).
        // A glob collection with no members is empty, not missing (P34).
        let named: Vec<String> = removed
            .iter()
            .filter(|n| st.subscription.names().contains(*n) && !xdstp::is_glob(n))
            .cloned()
            .collect();
        let not_found = core.not_found(kind, named);
        if core.has_not_found(kind) {
            for r in &resources {
                core.record_found(kind, &r.resource.name);
            }
        }
        core.record_not_found(kind, &not_found, false);
        let nonce = core.send(kind, &current.version);
        if given {
            // The client will hold what the subscription covers of `current`. (`resend`
            // lists in name order, each once.)
            debug_assert!(resent.is_sorted_by(|a, b| a.name < b.name));
            // What it held before: nothing, for a response sent at once in the given form.
            let was = match st.held.given() {
                Some(was) => Some(Arc::clone(was)),
                None => at_once.then(TypeSnapshot::empty),
            };
            let resent = (!resent.is_empty()).then(|| resent.into());
            let before = was.map(|snapshot| Box::new(GivenBefore { snapshot, resent }));
            st.held.give(current, before);
        } else {
            st.before = before;
        }
        if !warming.is_empty() {
            self.warm_again(kind, &warming.into());
        }
        Some(DeltaResponse {
            kind,
            system_version: current.version.clone(),
            nonce,
            resources: resources.into(),
            removed: removed.into_iter().collect(),
            not_found,
        })
    }
}

impl Delta {
    /// P28: a cluster sent anew warms until its ClusterLoadAssignment arrives again, even
    /// unchanged; one the client does not hold yet goes out anyway once it subscribes.
    /// `clusters`: those a response of `kind` sent (not as heartbeats).
    fn warm_again(&mut self, kind: ResourceType, clusters: &Arc<[Arc<Resource>]>) {
        let (ResourceType::Cluster, Some(eds)) = (kind, self.types.get_mut(ResourceType::Endpoint))
        else {
            return;
        };
        if eds.held.given().is_some() {
            // Looked up on its next response, with no name copied here (nor the list).
            eds.rewarm.push(Arc::clone(clusters));
        } else {
            for cla in clusters.iter().filter_map(|c| c.warms_with.as_ref()) {
                if eds.held.contains(&eds.subscription, cla) {
                    eds.dirty.insert(cla.clone(), true);
                }
            }
        }
    }
}

/// What a client holding what `subscription` selects of `held_at` (the given form) gets
/// again of `current` when `clusters` were sent anew (P28): the endpoints they warm with
/// that it holds, as they are now, in name order. Worked out once per list of clusters
/// and selection held, for the streams that share both (`TypeSnapshot::rewarmed`).
fn rewarmed(
    clusters: &Arc<[Arc<Resource>]>,
    held_at: &Arc<TypeSnapshot>,
    subscription: &Subscription,
    current: &Arc<TypeSnapshot>,
) -> Arc<Listed> {
    let held = subscription.select(held_at);
    if let Some((selection, listed)) = current.rewarmed.get(clusters) {
        if std::ptr::eq(selection.as_ptr(), Arc::as_ptr(&held)) {
            return listed;
        }
    }
    let names = super::rewarm_names(clusters.iter());
    let resources: Arc<[Arc<Resource>]> = resend(&names, held_at, subscription, current)
        .into_iter()
        .cloned()
        .collect();
    let listed = Arc::new(Listed::new(resources, super::response_cost));
    current
        .rewarmed
        .put(clusters, (Arc::downgrade(&held), Arc::clone(&listed)));
    listed
}

/// Of the endpoints `names` (sorted, each once), those a client holding what
/// `subscription` selects of `held_at` holds, as `current` has them (P28: they go again).
/// What the client holds (the selection shared by the streams naming the same names) is
/// walked beside the names, as the snapshot now, when that is cheaper than a lookup of
/// each (a push that changes most clusters; not one cluster among 100,000).
fn resend<'a>(
    names: &[&str],
    held_at: &Arc<TypeSnapshot>,
    subscription: &Subscription,
    current: &'a TypeSnapshot,
) -> Vec<&'a Arc<Resource>> {
    let mut resend = Vec::new();
    let held = subscription.select(held_at);
    let size = held.resources.len().max(current.resources.len());
    if crate::cache::merge_is_cheaper(names.len(), size) {
        let mut held = held.resources.iter().peekable();
        let mut now = current.resources.iter().peekable();
        for &name in names {
            while held.next_if(|r| r.name.as_str() < name).is_some() {}
            if held.peek().is_none_or(|r| r.name != name) {
                continue;
            }
            while now.next_if(|(n, _)| n.as_str() < name).is_some() {}
            if let Some((_, r)) = now.peek().filter(|(n, _)| n.as_str() == name) {
                resend.push(*r);
            }
        }
    } else {
        for &name in names {
            let is_held = held_at
                .resources
                .get(name)
                .is_some_and(|r| subscription.covers_resource(r));
            if let Some(r) = current.resources.get(name).filter(|_| is_held) {
                resend.push(r);
            }
        }
    }
    resend
}

/// How a resource came to be sent (see `respond_type`), the strongest first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Why {
    /// Changed, new to the client, or forced (P21, P22, P28).
    Send,
    /// A heartbeat due (P25).
    Heartbeat,
    /// Rejected, and due again with the type's change (P5).
    Again,
}

/// One entry per name, in name order, the strongest reason kept: what a map inserted in
/// that order would hold (a changed resource over a heartbeat, a heartbeat over one sent
/// again for a rejection). Every reason for a name carries the same resource, the current
/// snapshot's.
fn settle(send: &mut Vec<(&Arc<Resource>, Why)>) {
    send.sort_by(|a, b| a.0.name.cmp(&b.0.name).then(a.1.cmp(&b.1)));
    send.dedup_by(|later, first| later.0.name == first.0.name);
}

mod held;

#[cfg(test)]
mod tests;
