//! Incremental (delta) streams: Incremental ADS (`DeltaAggregatedResources`) and the
//! per-type `Delta*` methods (P17..P24), with TTLs and heartbeats (P25).
//!
//! Per type the stream keeps what the client holds as name -> version (`held`), and the
//! snapshot that map was last reconciled with (`basis`). On a new snapshot it asks the cache
//! for the names that changed since `basis` ([`TypeSnapshot::changes_since`], computed once
//! per node group and shared), so building a response costs what changed, not the size of
//! the type. Subscription changes mark names `dirty`; only a newly added wildcard looks at
//! the whole type.
//!
//! As in SotW, at most one response per type is in flight: the next goes out once the client
//! ACKs or NACKs it. Changes meanwhile accumulate and go out together. Time enters only as
//! an argument (`now`), for heartbeats: [`DeltaStream::poll_timeout`] says when to call
//! [`DeltaStream::poll_response`] again.

use std::collections::{BTreeMap, BTreeSet, HashSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::service::discovery::v3::DeltaDiscoveryRequest;

use super::{heartbeat_interval, ClientFeatures, Event, ProtocolError, Subscription, SyncState};
use super::{TypeStatus, Variant};
use crate::cache::{Snapshot, TypeSnapshot};
use crate::resource::{namespace_of, Resource, ResourceType};

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
    /// the TTL only, P25), or a VHDS alias nothing answers to (see [`unresolved_alias`]).
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

/// A delta response to send.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeltaResponse {
    pub kind: ResourceType,
    /// `system_version_info`: the type's version, for debugging only (P19).
    pub system_version: String,
    /// Fresh per response (P2).
    pub nonce: String,
    /// Resources new or changed for this client, in name order, each name once (P12, P19).
    pub resources: Vec<DeltaResource>,
    /// Names deleted, or subscribed to and not existing (P19, P20, P22).
    pub removed: Vec<String>,
}

/// One delta stream. See the module docs of `protocol` for the call order; `poll_response`
/// takes the current time, for heartbeats.
#[derive(Debug)]
pub struct DeltaStream {
    variant: Variant,
    node: Option<Node>,
    features: ClientFeatures,
    snapshot: Option<Arc<Snapshot>>,
    types: [TypeState; ResourceType::ALL.len()],
    nonces: u64,
    events: VecDeque<Event>,
}

/// What the client holds of one resource. A set of these, keyed by name through `Borrow<str>`,
/// is the stream's name -> version map; a resource sent shares its name with the snapshot
/// instead of copying it, which keeps large delta subscriptions small per stream.
#[derive(Clone, Debug)]
enum Held {
    /// Sent on this stream.
    Sent(Arc<Resource>),
    /// Listed in `initial_resource_versions` (P23): name and version.
    Claimed(Box<(String, String)>),
}

impl Held {
    fn name(&self) -> &str {
        match self {
            Held::Sent(r) => &r.name,
            Held::Claimed(c) => &c.0,
        }
    }

    fn version(&self) -> &str {
        match self {
            Held::Sent(r) => &r.version,
            Held::Claimed(c) => &c.1,
        }
    }
}

impl std::borrow::Borrow<str> for Held {
    fn borrow(&self) -> &str {
        self.name()
    }
}

impl std::hash::Hash for Held {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.name().hash(state)
    }
}

impl PartialEq for Held {
    fn eq(&self, other: &Held) -> bool {
        self.name() == other.name()
    }
}

impl Eq for Held {}

/// The response in flight, and what the client held before it, to restore on a NACK.
#[derive(Debug)]
struct InFlight {
    nonce: String,
    version: String,
    before: Vec<Before>,
}

/// What the client held of one name before a response changed it.
#[derive(Debug)]
enum Before {
    /// Nothing: the response added this resource (the common case, so no name is copied).
    Nothing(Arc<Resource>),
    /// This.
    Held(Held),
}

/// One type's sub-stream.
#[derive(Debug, Default)]
struct TypeState {
    requested: bool,
    subscription: Subscription,
    /// Name -> what the client holds (as far as the server knows).
    held: HashSet<Held>,
    /// The snapshot `held` was last reconciled with; names changed since then are looked at
    /// on the next response.
    basis: Option<Arc<TypeSnapshot>>,
    /// Names (as subscribed: resource names, aliases, VHDS namespaces) to look at on the next
    /// response, each with whether to send it even when the client holds its version (P21,
    /// P22, P28).
    dirty: BTreeMap<String, bool>,
    /// Look at every resource: the wildcard was just added.
    full: bool,
    /// The first response for a wildcard goes out even when empty, so the client knows the
    /// server has nothing (rather than waiting for its initial fetch to time out).
    announce: bool,
    in_flight: Option<InFlight>,
    /// The version the client last ACKed.
    acked_version: String,
    /// TTL'd resources the client holds: name -> when their next heartbeat is due (P25).
    heartbeats: BTreeMap<String, Instant>,
    state: SyncState,
}

impl TypeState {
    /// The client holds `resource` unchanged from before this stream (P23), so it is not sent
    /// again; if it has a TTL, the client's clock for it has been running since then, so a
    /// heartbeat goes out now rather than a third of the TTL from now (P25).
    fn refresh_soon(&mut self, resource: &Resource, now: Instant) {
        if resource.ttl.is_some() && !self.heartbeats.contains_key(&resource.name) {
            self.heartbeats.insert(resource.name.clone(), now);
        }
    }

    /// Record that the client now holds `resource`, remembering the former value for a NACK.
    fn hold(&mut self, resource: &Arc<Resource>, before: &mut Vec<Before>) {
        before.push(match self.held.replace(Held::Sent(Arc::clone(resource))) {
            None => Before::Nothing(Arc::clone(resource)),
            Some(old) => Before::Held(old),
        });
    }

    /// Record that the client no longer holds `name`, remembering the former value.
    fn release(&mut self, name: &str, before: &mut Vec<Before>) {
        self.heartbeats.remove(name);
        if let Some(old) = self.held.take(name) {
            before.push(Before::Held(old));
        }
    }

    /// A NACK: the client keeps what it had before the rejected response.
    fn restore(&mut self, before: Vec<Before>) {
        for b in before.into_iter().rev() {
            match b {
                Before::Nothing(r) => {
                    self.heartbeats.remove(&r.name);
                    self.held.remove(r.name.as_str());
                }
                Before::Held(old) => {
                    self.held.replace(old);
                }
            }
        }
    }

    /// Forget resources the subscription no longer covers (the client drops them itself).
    fn forget_uncovered(&mut self, current: &TypeSnapshot) {
        let subscription = &self.subscription;
        self.held
            .retain(|held| match current.resources.get(held.name()) {
                Some(r) => subscription.covers_resource(r),
                None => match held {
                    Held::Sent(r) => subscription.covers_resource(r),
                    Held::Claimed(c) => subscription.covers(&c.0),
                },
            });
        let held = &self.held;
        self.heartbeats
            .retain(|name, _| held.contains(name.as_str()));
    }
}

impl DeltaStream {
    /// A new stream on `variant`.
    pub fn new(variant: Variant) -> DeltaStream {
        DeltaStream {
            variant,
            node: None,
            features: ClientFeatures::default(),
            snapshot: None,
            types: Default::default(),
            nonces: 0,
            events: VecDeque::new(),
        }
    }

    /// The node that opened the stream (P1), once the first request arrived.
    pub fn node(&self) -> Option<&Node> {
        self.node.as_ref()
    }

    /// What the client has of `kind`: the last response's ACK/NACK state.
    pub fn state(&self, kind: ResourceType) -> &SyncState {
        &self.types[kind.index()].state
    }

    /// What the server knows of `kind` on this stream, if the client asked for it.
    pub fn status(&self, kind: ResourceType) -> Option<TypeStatus> {
        let st = &self.types[kind.index()];
        st.requested.then(|| TypeStatus {
            state: st.state.clone(),
            acked_version: st.acked_version.clone(),
        })
    }

    /// The resources of `kind` the client runs, as name -> version, in name order. After a
    /// NACK these are the versions it kept, not the rejected ones (P17).
    pub fn held(&self, kind: ResourceType) -> BTreeMap<&str, &str> {
        self.types[kind.index()]
            .held
            .iter()
            .map(|h| (h.name(), h.version()))
            .collect()
    }

    /// Take in one request from the client. An error ends the stream.
    pub fn handle_request(&mut self, request: DeltaDiscoveryRequest) -> Result<(), ProtocolError> {
        let kind = super::request_type(self.variant, &request.type_url)?;
        let first_on_stream = self.node.is_none();
        super::check_node(&mut self.node, request.node)?;
        if first_on_stream {
            if let Some(node) = &self.node {
                self.features = ClientFeatures::of(node);
            }
        }
        let current = self.snapshot.as_ref().map(|s| Arc::clone(s.get(kind)));
        let st = &mut self.types[kind.index()];

        // P17: an ACK or NACK of a response; P18: a stale nonce only loses its ACK meaning.
        if !request.response_nonce.is_empty() {
            let nonce = request.response_nonce;
            match st.in_flight.take() {
                Some(flight) if flight.nonce == nonce => match request.error_detail {
                    Some(status) => {
                        st.restore(flight.before);
                        st.state = SyncState::Nacked {
                            nonce,
                            rejected_version: flight.version.clone(),
                            accepted_version: st.acked_version.clone(),
                            error: status.message.clone(),
                        };
                        self.events.push_back(Event::Nacked {
                            kind,
                            rejected_version: flight.version,
                            error: status.message,
                        });
                    }
                    None => {
                        st.acked_version = flight.version.clone();
                        st.state = SyncState::Acked {
                            version: flight.version.clone(),
                        };
                        self.events.push_back(Event::Acked {
                            kind,
                            version: flight.version,
                        });
                    }
                },
                other => {
                    st.in_flight = other;
                    self.events.push_back(Event::Stale { kind, nonce });
                }
            }
        }

        let first = !st.requested;
        st.requested = true;
        // P23: what the client kept from an earlier stream; not sent again if unchanged.
        let mut claimed = HashSet::new();
        if first {
            for (name, version) in request.initial_resource_versions {
                st.dirty.entry(name.clone()).or_insert(false);
                claimed.insert(name.clone());
                st.held.replace(Held::Claimed(Box::new((name, version))));
            }
        }
        let change = st.subscription.apply_delta(
            first,
            &request.resource_names_subscribe,
            &request.resource_names_unsubscribe,
        );
        if change.wildcard_added {
            st.full = true;
            st.announce |= first;
        }
        // P21: named in subscribe, so sent even if the client seems to have it; except what
        // it has just told us it holds (P23).
        for name in change.subscribed.iter().chain(&change.resubscribed) {
            let forced = !claimed.contains(name);
            *st.dirty.entry(name.clone()).or_default() |= forced;
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
                st.held.remove(name.as_str());
                st.dirty.insert(name.clone(), true);
            } else {
                st.dirty.remove(name);
            }
        }
        if !change.unsubscribed.is_empty() && !st.subscription.is_wildcard() {
            st.forget_uncovered(current);
        }
        if change.wildcard_added
            || change.wildcard_dropped
            || !change.subscribed.is_empty()
            || !change.unsubscribed.is_empty()
        {
            self.events.push_back(Event::Subscribed {
                kind,
                wildcard: st.subscription.is_wildcard(),
                subscribed: change.subscribed,
                unsubscribed: change.unsubscribed,
            });
        }
        Ok(())
    }

    /// Take in the snapshot this stream's node should now have.
    pub fn handle_snapshot(&mut self, snapshot: Arc<Snapshot>) {
        self.snapshot = Some(snapshot);
    }

    /// The next response to send, if any. Call until `None` after every input, and when
    /// [`DeltaStream::poll_timeout`] passes. On an aggregated stream, types come out in the
    /// order CDS, EDS, LDS, RDS, SRDS, VHDS, then the others (P30).
    pub fn poll_response(&mut self, now: Instant) -> Option<DeltaResponse> {
        let snapshot = Arc::clone(self.snapshot.as_ref()?);
        super::served(self.variant)
            .iter()
            .find_map(|&kind| self.respond(kind, &snapshot, now))
    }

    /// When the next heartbeat is due, if any: call `poll_response` then. A type with a
    /// response in flight has none: its ACK or NACK is the next input anyway (and a timeout
    /// already past would otherwise wake the caller in a loop).
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.types
            .iter()
            .filter(|st| st.in_flight.is_none())
            .filter_map(|st| st.heartbeats.values().min())
            .min()
            .copied()
    }

    /// The next event (ACK, NACK, stale request), if any.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// Decide whether `kind` has something to send now, and build it.
    fn respond(
        &mut self,
        kind: ResourceType,
        snapshot: &Snapshot,
        now: Instant,
    ) -> Option<DeltaResponse> {
        let ttl_ok = self.features.resource_ttl;
        let st = &mut self.types[kind.index()];
        if !st.requested || st.in_flight.is_some() {
            return None;
        }
        let current = snapshot.get(kind);
        let mut send: BTreeMap<&str, (&Arc<Resource>, bool)> = BTreeMap::new();
        let mut removed: BTreeSet<String> = BTreeSet::new();
        let mut unresolved: Vec<String> = Vec::new();

        // Changes to the snapshot since the last look (P19).
        if let Some(basis) = &st.basis {
            for name in current.changes_since(basis).iter() {
                match current.resources.get(name) {
                    Some(r) if st.subscription.covers_resource(r) => {
                        if st.held.get(name.as_str()).map(Held::version) != Some(r.version.as_str())
                        {
                            send.insert(&r.name, (r, false));
                        }
                    }
                    Some(_) => {}
                    None => {
                        if st.held.contains(name.as_str()) {
                            removed.insert(name.clone());
                        }
                    }
                }
            }
        }
        // A wildcard just added: everything the client lacks.
        if std::mem::take(&mut st.full) {
            for r in current.resources.values() {
                if st.held.get(r.name.as_str()).map(Held::version) != Some(r.version.as_str()) {
                    send.insert(&r.name, (r, false));
                } else if ttl_ok {
                    st.refresh_soon(r, now);
                }
            }
        }
        // Names subscribed, re-subscribed, unsubscribed under a wildcard, or claimed (P20..P23).
        for (name, forced) in std::mem::take(&mut st.dirty) {
            let found = current.resolve(kind, &name);
            if found.is_empty() {
                if kind == ResourceType::VirtualHost
                    && namespace_of(kind, &name).is_some()
                    && !st.held.contains(name.as_str())
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
                    st.held.remove(r.name.as_str());
                    st.heartbeats.remove(&r.name);
                } else if forced
                    || st.held.get(r.name.as_str()).map(Held::version) != Some(r.version.as_str())
                {
                    send.insert(&r.name, (r, false));
                } else if ttl_ok {
                    st.refresh_soon(r, now);
                }
            }
        }
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
                    if st.held.get(name.as_str()).map(Held::version)
                        == Some(r.version.as_str()) =>
                {
                    send.entry(&r.name).or_insert((r, true));
                }
                // Changed or gone: the diff above sends or removes it.
                _ => {
                    st.heartbeats.remove(&name);
                }
            }
        }
        st.basis = Some(Arc::clone(current));
        let announce = std::mem::take(&mut st.announce);
        if send.is_empty() && removed.is_empty() && unresolved.is_empty() && !announce {
            return None;
        }

        let mut before = Vec::with_capacity(send.len() + removed.len());
        let mut resources = Vec::with_capacity(send.len());
        let mut warming = Vec::new();
        for (_, (r, heartbeat)) in send {
            removed.remove(&r.name);
            let ttl = r.ttl.filter(|_| ttl_ok);
            match ttl {
                Some(ttl) => {
                    st.heartbeats
                        .insert(r.name.clone(), now + heartbeat_interval(ttl));
                }
                None => {
                    st.heartbeats.remove(&r.name);
                }
            }
            if !heartbeat {
                st.hold(r, &mut before);
                if let Some(cla) = &r.warms_with {
                    warming.push(cla.clone());
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
            st.release(name, &mut before);
        }
        self.nonces += 1;
        let nonce = self.nonces.to_string();
        st.in_flight = Some(InFlight {
            nonce: nonce.clone(),
            version: current.version.clone(),
            before,
        });
        st.state = SyncState::Sent {
            nonce: nonce.clone(),
            version: current.version.clone(),
        };
        // P28: a cluster sent anew warms until its ClusterLoadAssignment arrives again, even
        // unchanged; one the client does not hold yet goes out anyway once it subscribes.
        if kind == ResourceType::Cluster {
            let eds = &mut self.types[ResourceType::Endpoint.index()];
            for cla in warming {
                if eds.held.contains(cla.as_str()) {
                    eds.dirty.insert(cla, true);
                }
            }
        }
        Some(DeltaResponse {
            kind,
            system_version: current.version.clone(),
            nonce,
            resources,
            removed: removed.into_iter().collect(),
        })
    }
}

#[cfg(test)]
mod tests;
