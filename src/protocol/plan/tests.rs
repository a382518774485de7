//! Unit tests of make-before-break (P28-P30), driving SotW and delta ADS streams with a
//! simulated Envoy: it applies every response, subscribes to the ClusterLoadAssignments,
//! route configurations and secrets of what it holds before it ACKs (as Envoy does), and
//! tracks warming (a cluster is active once its ClusterLoadAssignment arrived after it).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::service::discovery::v3::{DeltaDiscoveryRequest, DiscoveryRequest};
use envoy_types::pb::google::rpc::Status;

use super::{steps, PlanEvent, DEFAULT_STEP_TIMEOUT};
use crate::cache::Snapshot;
use crate::config::content_hash;
use crate::protocol::stream::Flavor;
use crate::protocol::{DeltaStream, Event, Ordering, PlanStatus, SotwStream, Stream, Variant};
use crate::resource::{Resource, ResourceType};

use ResourceType::{Cluster, Endpoint, Listener, Route, Secret};

// === resources with references ===

/// A resource whose version follows its content and references; an EDS cluster warms with
/// the ClusterLoadAssignment of its name.
fn res(
    kind: ResourceType,
    name: &str,
    content: &str,
    refs: &[(ResourceType, &str)],
) -> Arc<Resource> {
    let refs: Vec<(ResourceType, String)> = refs.iter().map(|(k, n)| (*k, n.to_string())).collect();
    let mut key = format!("{name}:{content}");
    for (k, n) in &refs {
        key.push_str(&format!(":{k}/{n}"));
    }
    let warms_with = (kind == Cluster).then(|| name.to_string());
    let mut refs = refs;
    if let Some(cla) = &warms_with {
        refs.push((Endpoint, cla.clone()));
    }
    Arc::new(
        Resource::new(
            kind,
            name,
            content_hash([key.as_bytes()]),
            key.into_bytes(),
            warms_with,
        )
        .with_references(refs),
    )
}

/// A mesh: clusters (each with its endpoints), routes (name -> cluster), listeners (name ->
/// route), secrets (name -> content), listener secrets (listener -> secret).
#[derive(Clone, Default)]
struct Mesh {
    clusters: Vec<(&'static str, &'static str)>,
    routes: Vec<(&'static str, &'static str)>,
    listeners: Vec<(&'static str, &'static str)>,
    secrets: Vec<(&'static str, &'static str)>,
    listener_secrets: Vec<(&'static str, &'static str)>,
}

impl Mesh {
    fn snapshot(&self) -> Arc<Snapshot> {
        let mut items = Vec::new();
        for (c, content) in &self.clusters {
            items.push(res(Cluster, c, content, &[]));
            items.push(res(Endpoint, c, content, &[]));
        }
        for (r, c) in &self.routes {
            items.push(res(Route, r, "", &[(Cluster, c)]));
        }
        for (l, r) in &self.listeners {
            let mut refs = vec![(Route, *r)];
            refs.extend(
                self.listener_secrets
                    .iter()
                    .filter(|(ll, _)| ll == l)
                    .map(|(_, s)| (Secret, *s)),
            );
            items.push(res(Listener, l, "", &refs));
        }
        for (s, content) in &self.secrets {
            items.push(res(Secret, s, content, &[]));
        }
        Arc::new(Snapshot::from_resources(&items))
    }
}

// === the simulated Envoy ===

/// A response as the client got it.
#[derive(Clone, Debug)]
struct Got {
    kind: ResourceType,
    resources: Vec<Arc<Resource>>,
    removed: Vec<String>,
    full_state: bool,
    version: String,
    nonce: String,
}

impl Got {
    fn names(&self) -> Vec<&str> {
        self.resources.iter().map(|r| r.name.as_str()).collect()
    }
}

/// One ADS stream as the simulated Envoy drives it (SotW or delta).
trait Client: Sized {
    type Flavor: Flavor;
    fn open(ordering: Ordering) -> Self {
        Self::open_limited(ordering, crate::protocol::DEFAULT_MAX_RESPONSE_BYTES)
    }
    /// A stream splitting responses over `limit` bytes (`--max-response-bytes`).
    fn open_limited(ordering: Ordering, limit: usize) -> Self;
    fn stream(&self) -> &Stream<Self::Flavor>;
    fn stream_mut(&mut self) -> &mut Stream<Self::Flavor>;
    /// Ask for exactly `names` of `kind` (for CDS and LDS: the wildcard).
    fn set_names(&mut self, kind: ResourceType, names: &BTreeSet<String>);
    fn next(&mut self, now: Instant) -> Option<Got>;
    fn ack(&mut self, got: &Got);
    fn nack(&mut self, got: &Got, error: &str);

    /// A new stream of the same client, back (to this server or another) with what it
    /// holds: its first request of each type it had says so (SotW: the version it last
    /// accepted; delta: the names and versions in `held`), CDS and LDS first, as Envoy.
    fn reconnect(&self, ordering: Ordering, held: &Proxy) -> Self {
        let mut back = self.reopen(ordering);
        for kind in REQUEST_ORDER {
            back.claim(kind, held);
        }
        back
    }
    /// A new stream of the same client, no request sent yet.
    fn reopen(&self, ordering: Ordering) -> Self;
    /// The first request of `kind` on a reopened stream, saying what it holds (if it asked
    /// for `kind` before).
    fn claim(&mut self, kind: ResourceType, held: &Proxy);

    fn snapshot(&mut self, snapshot: Arc<Snapshot>) {
        self.stream_mut().handle_snapshot(snapshot);
    }

    fn plan(&self) -> Option<PlanStatus> {
        self.stream().plan_status()
    }

    fn events(&mut self) -> Vec<Event> {
        std::iter::from_fn(|| self.stream_mut().poll_event()).collect()
    }

    fn timeout(&self) -> Option<Instant> {
        self.stream().poll_timeout()
    }

    fn rejected(&self) -> Vec<(ResourceType, String, String)> {
        self.stream().rejected_resources()
    }
}

/// A NACK's `error_detail`, or none.
fn error_detail(error: Option<&str>) -> Option<Status> {
    error.map(|e| Status {
        code: 3,
        message: e.into(),
        details: vec![],
    })
}

fn node() -> Node {
    Node {
        id: "envoy".into(),
        cluster: "test".into(),
        ..Default::default()
    }
}

struct Sotw {
    s: SotwStream,
    names: BTreeMap<ResourceType, Vec<String>>,
    /// Per type: the last version accepted and the last nonce received.
    last: BTreeMap<ResourceType, (String, String)>,
}

impl Sotw {
    fn request(&mut self, kind: ResourceType, error: Option<&str>) {
        let (version, nonce) = self.last.get(&kind).cloned().unwrap_or_default();
        let request = DiscoveryRequest {
            version_info: version,
            node: Some(node()),
            resource_names: self.names.get(&kind).cloned().unwrap_or_default(),
            type_url: kind.type_url().into(),
            response_nonce: nonce,
            error_detail: error_detail(error),
            ..Default::default()
        };
        self.s.handle_request(request).expect("valid request");
    }
}

impl Client for Sotw {
    type Flavor = crate::protocol::Sotw;
    fn open_limited(ordering: Ordering, limit: usize) -> Sotw {
        Sotw {
            s: SotwStream::with_ordering(Variant::Aggregated, ordering).with_response_limit(limit),
            names: BTreeMap::new(),
            last: BTreeMap::new(),
        }
    }

    fn stream(&self) -> &Stream<Self::Flavor> {
        &self.s
    }

    fn stream_mut(&mut self) -> &mut Stream<Self::Flavor> {
        &mut self.s
    }

    fn set_names(&mut self, kind: ResourceType, names: &BTreeSet<String>) {
        let names: Vec<String> = if envoy_wildcard(kind) {
            Vec::new() // the legacy wildcard
        } else {
            names.iter().cloned().collect()
        };
        // Unchanged, or nothing wanted of a type never asked for (an empty first request
        // would be the legacy wildcard, P15).
        if self.names.get(&kind) == Some(&names)
            || (names.is_empty() && !envoy_wildcard(kind) && !self.names.contains_key(&kind))
        {
            return;
        }
        self.names.insert(kind, names);
        self.request(kind, None);
    }

    fn next(&mut self, now: Instant) -> Option<Got> {
        let r = self.s.poll_response(now)?;
        // As Envoy takes it: a response to its wildcard watch is the whole set (what it
        // leaves out is removed), whatever the server meant (docs/protocol.md, "What Envoy
        // does with each type").
        let full_state = envoy_wildcard(r.kind);
        Some(Got {
            kind: r.kind,
            resources: r.resources.to_vec(),
            removed: Vec::new(),
            full_state,
            version: r.version,
            nonce: r.nonce,
        })
    }

    fn ack(&mut self, got: &Got) {
        self.last
            .insert(got.kind, (got.version.clone(), got.nonce.clone()));
        self.request(got.kind, None);
    }

    fn nack(&mut self, got: &Got, error: &str) {
        let version = self
            .last
            .get(&got.kind)
            .map(|l| l.0.clone())
            .unwrap_or_default();
        self.last.insert(got.kind, (version, got.nonce.clone()));
        self.request(got.kind, Some(error));
    }

    fn reopen(&self, ordering: Ordering) -> Sotw {
        let mut back = Sotw::open(ordering);
        // Nothing named of a type that is not full state is not asked for at all on a new
        // stream (an empty request would be the legacy wildcard, P15).
        back.names = self
            .names
            .iter()
            .filter(|(k, names)| envoy_wildcard(**k) || !names.is_empty())
            .map(|(k, names)| (*k, names.clone()))
            .collect();
        back.last = self
            .last
            .iter()
            .map(|(k, (version, _))| (*k, (version.clone(), String::new())))
            .collect();
        back
    }

    fn claim(&mut self, kind: ResourceType, _: &Proxy) {
        if self.names.contains_key(&kind) {
            self.request(kind, None);
        }
    }
}

/// Whether Envoy subscribes to `kind` by wildcard (CDS, LDS, SRDS), as the type table says
/// (`resource::envoy`).
fn envoy_wildcard(kind: ResourceType) -> bool {
    kind.envoy().subscribes == crate::resource::envoy::Subscribes::Wildcard
}

/// The order in which Envoy's first requests on a stream come.
const REQUEST_ORDER: [ResourceType; 4] = [Cluster, Listener, Endpoint, Route];

struct Delta {
    s: DeltaStream,
    names: BTreeMap<ResourceType, BTreeSet<String>>,
}

impl Delta {
    fn send(
        &mut self,
        kind: ResourceType,
        sub: Vec<String>,
        unsub: Vec<String>,
        nonce: &str,
        error: Option<&str>,
    ) {
        let request = DeltaDiscoveryRequest {
            node: Some(node()),
            type_url: kind.type_url().into(),
            resource_names_subscribe: sub,
            resource_names_unsubscribe: unsub,
            response_nonce: nonce.into(),
            error_detail: error_detail(error),
            ..Default::default()
        };
        self.s.handle_request(request).expect("valid request");
    }
}

impl Client for Delta {
    type Flavor = crate::protocol::Delta;
    fn open_limited(ordering: Ordering, limit: usize) -> Delta {
        Delta {
            s: DeltaStream::with_ordering(Variant::Aggregated, ordering).with_response_limit(limit),
            names: BTreeMap::new(),
        }
    }

    fn stream(&self) -> &Stream<Self::Flavor> {
        &self.s
    }

    fn stream_mut(&mut self) -> &mut Stream<Self::Flavor> {
        &mut self.s
    }

    fn set_names(&mut self, kind: ResourceType, names: &BTreeSet<String>) {
        if envoy_wildcard(kind) {
            if self.names.insert(kind, BTreeSet::new()).is_none() {
                self.send(kind, Vec::new(), Vec::new(), "", None); // the legacy wildcard
            }
            return;
        }
        let had = self.names.entry(kind).or_default().clone();
        let sub: Vec<String> = names.difference(&had).cloned().collect();
        let unsub: Vec<String> = had.difference(names).cloned().collect();
        if sub.is_empty() && unsub.is_empty() {
            return;
        }
        self.names.insert(kind, names.clone());
        self.send(kind, sub, unsub, "", None);
    }

    fn next(&mut self, now: Instant) -> Option<Got> {
        let r = self.s.poll_response(now)?;
        Some(Got {
            kind: r.kind,
            resources: r.resources.into_iter().map(|d| d.resource).collect(),
            removed: r.removed,
            full_state: false,
            version: r.system_version,
            nonce: r.nonce,
        })
    }

    fn ack(&mut self, got: &Got) {
        self.send(got.kind, Vec::new(), Vec::new(), &got.nonce, None);
    }

    fn nack(&mut self, got: &Got, error: &str) {
        self.send(got.kind, Vec::new(), Vec::new(), &got.nonce, Some(error));
    }

    fn reopen(&self, ordering: Ordering) -> Delta {
        let mut back = Delta::open(ordering);
        back.names = self.names.clone();
        back
    }

    fn claim(&mut self, kind: ResourceType, held: &Proxy) {
        let Some(names) = self.names.get(&kind) else {
            return;
        };
        let request = DeltaDiscoveryRequest {
            node: Some(node()),
            type_url: kind.type_url().into(),
            resource_names_subscribe: names.iter().cloned().collect(),
            initial_resource_versions: held
                .have
                .get(&kind)
                .into_iter()
                .flatten()
                .map(|(n, r)| (n.clone(), r.version.clone()))
                .collect(),
            ..Default::default()
        };
        self.s.handle_request(request).expect("valid request");
    }
}

/// What the simulated Envoy holds, and which clusters are still warming: a cluster new to
/// it warms until its ClusterLoadAssignment arrives and, as with an active health check,
/// until it ACKs the CDS response that brought it (Envoy holds that ACK until the cluster is
/// warm). A changed cluster warms too, but its previous version keeps serving meanwhile
/// (Envoy swaps it in once warm), so it stays usable.
#[derive(Default)]
struct Proxy {
    have: BTreeMap<ResourceType, BTreeMap<String, Arc<Resource>>>,
    warming: BTreeSet<String>,
    /// New clusters whose CDS response is not ACKed yet (their first health check).
    checking: BTreeSet<String>,
    /// Clusters whose ClusterLoadAssignment was removed (delta): Envoy ends their warming
    /// with no endpoints, and a route to one fails.
    empty: BTreeSet<String>,
}

impl Proxy {
    fn apply(&mut self, got: &Got) {
        let have = self.have.entry(got.kind).or_default();
        let mut gone: Vec<String> = got.removed.clone();
        if got.full_state {
            let sent: BTreeSet<&str> = got.names().into_iter().collect();
            gone.extend(have.keys().filter(|n| !sent.contains(n.as_str())).cloned());
        }
        for name in gone {
            have.remove(&name);
            if got.kind == Cluster {
                self.warming.remove(&name);
                self.checking.remove(&name);
                self.empty.remove(&name);
            }
        }
        for r in &got.resources {
            if got.kind == Cluster && !have.contains_key(&r.name) {
                self.checking.insert(r.name.clone());
                if r.warms_with.is_some() {
                    self.warming.insert(r.name.clone());
                }
            }
            have.insert(r.name.clone(), Arc::clone(r));
        }
        if got.kind == Endpoint {
            let clusters = self.have.get(&Cluster).cloned().unwrap_or_default();
            for c in clusters.values() {
                let Some(cla) = c.warms_with.as_deref() else {
                    continue;
                };
                if got.resources.iter().any(|r| r.name == cla) {
                    self.warming.remove(&c.name);
                    self.empty.remove(&c.name);
                } else if got.removed.iter().any(|r| r == cla) {
                    self.warming.remove(&c.name);
                    self.empty.insert(c.name.clone());
                }
            }
        }
    }

    /// Take `got` as `answer` says: all of it, or (a NACK, as Envoy does with CDS) what is
    /// valid, keeping the old version of what is not (content `bad`).
    fn take(&mut self, got: &Got, answer: Answer) {
        if answer != Answer::Nack {
            return self.apply(got);
        }
        let mut valid = got.clone();
        let have = self.have.get(&got.kind).cloned().unwrap_or_default();
        valid.resources = got
            .resources
            .iter()
            .filter_map(|r| {
                if r.body.ends_with(b":bad") {
                    have.get(&r.name).cloned()
                } else {
                    Some(Arc::clone(r))
                }
            })
            .collect();
        self.apply(&valid);
    }

    /// Subscribe to what new clusters, listeners and routes name, as Envoy does before it
    /// ACKs them, and forget what it no longer names.
    fn subscribe(&mut self, client: &mut impl Client) {
        for kind in [Secret, Endpoint, Route] {
            let wants = self.wants(kind);
            self.keep_only(kind, &wants);
            client.set_names(kind, &wants);
        }
    }

    /// It ACKs `got`: the clusters it brought passed their first health check.
    fn acked(&mut self, got: &Got) {
        if got.kind == Cluster {
            for r in &got.resources {
                self.checking.remove(&r.name);
            }
        }
    }

    /// The names of `kind` that what it holds refers to (what Envoy subscribes to).
    fn wants(&self, kind: ResourceType) -> BTreeSet<String> {
        let from: &[ResourceType] = match kind {
            Endpoint => &[Cluster],
            Route => &[Listener],
            Secret => &[Listener, Cluster],
            _ => &[],
        };
        from.iter()
            .flat_map(|k| self.have.get(k).into_iter().flat_map(|m| m.values()))
            .flat_map(|r| r.refers_to(kind).map(str::to_string).collect::<Vec<_>>())
            .collect()
    }

    /// Drop what it no longer subscribes to (Envoy forgets unsubscribed resources).
    fn keep_only(&mut self, kind: ResourceType, names: &BTreeSet<String>) {
        if let Some(have) = self.have.get_mut(&kind) {
            have.retain(|n, _| names.contains(n));
        }
    }

    /// P29: every route a listener it holds uses names only clusters it has active.
    fn violations(&self) -> Vec<String> {
        let routes = self.have.get(&Route).cloned().unwrap_or_default();
        let clusters = self.have.get(&Cluster).cloned().unwrap_or_default();
        let mut bad = Vec::new();
        for listener in self
            .have
            .get(&Listener)
            .into_iter()
            .flat_map(|m| m.values())
        {
            for route in listener.refers_to(Route).filter_map(|r| routes.get(r)) {
                for c in route.refers_to(Cluster) {
                    if !clusters.contains_key(c) {
                        bad.push(format!(
                            "route {} names cluster {c}, which it lacks",
                            route.name
                        ));
                    } else if self.empty.contains(c) {
                        bad.push(format!(
                            "route {} names cluster {c}, whose endpoints were removed",
                            route.name
                        ));
                    } else if self.warming.contains(c) || self.checking.contains(c) {
                        bad.push(format!(
                            "route {} names cluster {c}, still warming",
                            route.name
                        ));
                    }
                }
            }
        }
        bad
    }
}

/// A simulated Envoy on one ADS stream.
struct Envoy<C> {
    client: C,
    proxy: Proxy,
    /// Every response so far.
    log: Vec<Got>,
    /// Which responses to leave unanswered (a silent client) or NACK.
    answer: fn(&Got) -> Answer,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Answer {
    Ack,
    Nack,
    Silence,
}

fn ack_all(_: &Got) -> Answer {
    Answer::Ack
}

/// A client slow to ACK CDS (as Envoy is while new clusters warm).
fn silent_on_cds(g: &Got) -> Answer {
    if g.kind == Cluster {
        Answer::Silence
    } else {
        Answer::Ack
    }
}

impl<C: Client> Envoy<C> {
    /// Connect with wildcard CDS and LDS, take `mesh` and run until quiet.
    fn start(ordering: Ordering, first: Arc<Snapshot>) -> Envoy<C> {
        Envoy::start_with(C::open(ordering), first)
    }

    /// The same on `client`.
    fn start_with(client: C, first: Arc<Snapshot>) -> Envoy<C> {
        let mut client = client;
        client.snapshot(first);
        client.set_names(Cluster, &BTreeSet::new());
        client.set_names(Listener, &BTreeSet::new());
        let mut envoy = Envoy {
            client,
            proxy: Proxy::default(),
            log: Vec::new(),
            answer: ack_all,
        };
        envoy.run(Instant::now());
        envoy.log.clear();
        envoy
    }

    /// Take responses until none is left, applying and answering each; panics on a P29
    /// violation.
    fn run(&mut self, now: Instant) {
        if let Err(e) = self.try_run(now) {
            panic!("{e}");
        }
    }

    /// As `run`, but a P29 violation is returned, with the responses so far.
    fn try_run(&mut self, now: Instant) -> Result<(), String> {
        for _ in 0..100 {
            let Some(got) = self.client.next(now) else {
                return Ok(());
            };
            self.log.push(got.clone());
            let answer = (self.answer)(&got);
            self.proxy.take(&got, answer);
            let bad = self.proxy.violations();
            if !bad.is_empty() {
                return Err(format!(
                    "P29 violated: {bad:?}; responses: {:?}",
                    self.trace()
                ));
            }
            self.proxy.subscribe(&mut self.client);
            match answer {
                Answer::Ack => self.ack(&got),
                Answer::Nack => self.client.nack(&got, "rejected"),
                Answer::Silence => {}
            }
        }
        panic!("the stream never went quiet: {:?}", self.trace());
    }

    /// ACK `got` (now, or late).
    fn ack(&mut self, got: &Got) {
        self.proxy.acked(got);
        self.client.ack(got);
    }

    /// The responses so far as `CDS[a,b] -[x]`, in order.
    fn trace(&self) -> Vec<String> {
        self.log
            .iter()
            .map(|g| {
                let mut t = format!("{}{:?}", g.kind, g.names());
                if !g.removed.is_empty() {
                    t.push_str(&format!(" -{:?}", g.removed));
                }
                t
            })
            .collect()
    }

    /// Position of the first response matching `what`.
    fn first(&self, what: impl Fn(&Got) -> bool) -> Option<usize> {
        self.log.iter().position(what)
    }

    /// What it holds of `kind`: names.
    fn holds(&self, kind: ResourceType) -> Vec<String> {
        self.proxy
            .have
            .get(&kind)
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default()
    }
}

/// The response that deletes cluster `name`: SotW, the first CDS without it; delta, the one
/// listing it removed.
fn removes(name: &'static str) -> impl Fn(&Got) -> bool {
    move |g| {
        g.kind == Cluster
            && (g.removed.iter().any(|r| r == name) || (g.full_state && !g.names().contains(&name)))
    }
}

fn sends(kind: ResourceType, name: &'static str) -> impl Fn(&Got) -> bool {
    move |g| g.kind == kind && g.names().contains(&name)
}

/// One test per flavor for each generic scenario.
macro_rules! sotw_and_delta {
    ($($scenario:ident),* $(,)?) => {$(
        mod $scenario {
            #[test]
            fn sotw() {
                super::$scenario::<super::Sotw>();
            }

            #[test]
            fn delta() {
                super::$scenario::<super::Delta>();
            }
        }
    )*};
}

sotw_and_delta!(
    p30_added_cluster_and_a_route_to_it_route_waits_for_the_cluster,
    p30_route_cut_over_x_to_y_moves_the_route_before_x_is_removed,
    p30_new_listener_route_and_clusters_go_after_the_clusters,
    p30_removed_listener_goes_before_its_route_and_clusters,
    p30_secret_rotation_goes_before_the_change_that_uses_it,
    p30_nack_mid_plan_holds_back_what_depends_on_the_rejected_and_the_rest_goes_on,
    p30_newer_snapshot_mid_plan_replaces_the_rest,
    p30_silent_client_gets_the_next_step_after_the_time_out,
    p30_endpoints_only_change_is_one_response_and_no_plan,
    p30_ordering_off_sends_everything_at_once,
    p29_p30_model_a_simulated_envoy_never_routes_to_a_cluster_it_lacks,
    p30_endpoints_split_for_the_response_limit_still_go_before_the_route,
);

/// Content large enough that two ClusterLoadAssignments fill a 2 KiB response.
const BIG: &str = "a-very-long-endpoint-list-a-very-long-endpoint-list-a-very-long-endpoint-list-\
                   a-very-long-endpoint-list-a-very-long-endpoint-list-a-very-long-endpoint-list-\
                   a-very-long-endpoint-list-a-very-long-endpoint-list-a-very-long-endpoint-list-\
                   a-very-long-endpoint-list-a-very-long-endpoint-list-a-very-long-endpoint-list-\
                   a-very-long-endpoint-list-a-very-long-endpoint-list-a-very-long-endpoint-list";

/// Five new clusters whose endpoints go in several EDS responses (the response limit), and
/// the route moved to the last of them: the route still goes only once its cluster is warm
/// (the simulated Envoy fails the run otherwise, P29), each EDS part after the ACK of the
/// one before, and the plan completes.
fn p30_endpoints_split_for_the_response_limit_still_go_before_the_route<C: Client>() {
    let client = C::open_limited(Ordering::default(), 2048);
    let mut envoy = Envoy::start_with(client, base().snapshot());
    let new = Mesh {
        clusters: vec![
            ("x", "1"),
            ("y1", BIG),
            ("y2", BIG),
            ("y3", BIG),
            ("y4", BIG),
            ("y5", BIG),
        ],
        routes: vec![("r", "y5")],
        ..base()
    };
    envoy.client.snapshot(new.snapshot());
    envoy.run(Instant::now());
    let t = envoy.trace();
    let parts = envoy.log.iter().filter(|g| g.kind == Endpoint).count();
    assert!(parts >= 3, "EDS in parts: {t:?}");
    let eds_y5 = envoy.first(sends(Endpoint, "y5")).expect("EDS of y5");
    let rds = envoy.first(sends(Route, "r")).expect("RDS r");
    assert!(eds_y5 < rds, "{t:?}");
    assert_eq!(envoy.client.plan(), None, "the plan completed");
    let events = envoy.client.events();
    assert!(
        events
            .iter()
            .any(|e| matches!(e, Event::Split { kind: Endpoint, .. })),
        "{events:?}"
    );
}

fn base() -> Mesh {
    Mesh {
        clusters: vec![("x", "1")],
        routes: vec![("r", "x")],
        listeners: vec![("l", "r")],
        ..Mesh::default()
    }
}

fn p30_added_cluster_and_a_route_to_it_route_waits_for_the_cluster<C: Client>() {
    let mut envoy = Envoy::<C>::start(Ordering::default(), base().snapshot());
    let new = Mesh {
        clusters: vec![("x", "1"), ("y", "1")],
        routes: vec![("r", "y")],
        ..base()
    };
    envoy.client.snapshot(new.snapshot());
    envoy.run(Instant::now());
    let t = envoy.trace();
    let cds = envoy.first(sends(Cluster, "y")).expect("CDS with y");
    let eds = envoy.first(sends(Endpoint, "y")).expect("EDS of y");
    let rds = envoy.first(sends(Route, "r")).expect("RDS r");
    assert!(cds < eds && eds < rds, "{t:?}");
    assert_eq!(t.len(), 3, "nothing else goes out: {t:?}");
    assert_eq!(envoy.client.plan(), None, "the plan completed");
    let events = envoy.client.events();
    assert!(
        events.contains(&Event::Plan(PlanEvent::Started { steps: 2 })),
        "{events:?}"
    );
}

fn p30_route_cut_over_x_to_y_moves_the_route_before_x_is_removed<C: Client>() {
    let mut envoy = Envoy::<C>::start(Ordering::default(), base().snapshot());
    let new = Mesh {
        clusters: vec![("y", "1")],
        routes: vec![("r", "y")],
        ..base()
    };
    envoy.client.snapshot(new.snapshot());
    envoy.run(Instant::now());
    let t = envoy.trace();
    let add_y = envoy.first(sends(Cluster, "y")).expect("CDS with y");
    let eds_y = envoy.first(sends(Endpoint, "y")).expect("EDS of y");
    let move_r = envoy.first(sends(Route, "r")).expect("RDS r");
    let remove_x = envoy.first(removes("x")).expect("x removed");
    assert!(
        add_y < eds_y && eds_y < move_r && move_r < remove_x,
        "{t:?}"
    );
    // Step 1 keeps x: the CDS that adds y still carries it (SotW) or removes nothing (delta).
    assert!(!removes("x")(&envoy.log[add_y]), "{t:?}");
    assert_eq!(envoy.holds(Cluster), ["y"]);
    assert_eq!(envoy.client.plan(), None);
}

fn p30_new_listener_route_and_clusters_go_after_the_clusters<C: Client>() {
    let mut envoy = Envoy::<C>::start(Ordering::default(), base().snapshot());
    let new = Mesh {
        clusters: vec![("x", "1"), ("c", "1"), ("d", "1")],
        routes: vec![("r", "x"), ("r2", "c"), ("r3", "d")],
        listeners: vec![("l", "r"), ("l2", "r2"), ("l3", "r3")],
        ..Mesh::default()
    };
    envoy.client.snapshot(new.snapshot());
    envoy.run(Instant::now());
    let t = envoy.trace();
    let eds_c = envoy.first(sends(Endpoint, "c")).expect("EDS c");
    let eds_d = envoy.first(sends(Endpoint, "d")).expect("EDS d");
    let lds = envoy.first(sends(Listener, "l2")).expect("LDS l2");
    assert!(eds_c < lds && eds_d < lds, "{t:?}");
    assert_eq!(envoy.holds(Route), ["r", "r2", "r3"]);
}

fn p30_removed_listener_goes_before_its_route_and_clusters<C: Client>() {
    let two = Mesh {
        clusters: vec![("x", "1"), ("b", "1")],
        routes: vec![("r", "x"), ("r2", "b")],
        listeners: vec![("l", "r"), ("l2", "r2")],
        ..Mesh::default()
    };
    let mut envoy = Envoy::<C>::start(Ordering::default(), two.snapshot());
    envoy.client.snapshot(base().snapshot());
    envoy.run(Instant::now());
    let t = envoy.trace();
    let drop_l2 = envoy
        .first(|g| {
            g.kind == Listener
                && (g.removed.iter().any(|r| r == "l2")
                    || (g.full_state && !g.names().contains(&"l2")))
        })
        .expect("l2 removed");
    let drop_b = envoy.first(removes("b")).expect("b removed");
    assert!(drop_l2 < drop_b, "{t:?}");
    assert_eq!(envoy.holds(Cluster), ["x"]);
    assert_eq!(envoy.holds(Listener), ["l"]);
}

fn p30_secret_rotation_goes_before_the_change_that_uses_it<C: Client>() {
    let with_secret = |content: &'static str, route_to: &'static str| Mesh {
        clusters: vec![("x", "1"), ("y", "1")],
        routes: vec![("r", route_to)],
        secrets: vec![("cert", content)],
        listener_secrets: vec![("l", "cert")],
        ..base()
    };
    let mut envoy = Envoy::<C>::start(Ordering::default(), with_secret("v1", "x").snapshot());
    assert_eq!(envoy.holds(Secret), ["cert"]);
    // A rotation alone is one SDS response, no plan.
    envoy.client.snapshot(with_secret("v2", "x").snapshot());
    envoy.run(Instant::now());
    assert_eq!(envoy.trace(), ["SDS[\"cert\"]"]);
    assert!(!envoy
        .client
        .events()
        .iter()
        .any(|e| matches!(e, Event::Plan(_))));
    // With a route change: the secret first, the route once the secret is ACKed.
    envoy.log.clear();
    envoy.client.snapshot(with_secret("v3", "y").snapshot());
    envoy.run(Instant::now());
    let t = envoy.trace();
    let sds = envoy.first(sends(Secret, "cert")).expect("SDS");
    let rds = envoy.first(sends(Route, "r")).expect("RDS");
    assert!(sds < rds, "{t:?}");
}

/// The simulated Envoy rejects any CDS response that brings cluster `y` with content `bad`.
fn nack_bad_y(g: &Got) -> Answer {
    let bad = g
        .resources
        .iter()
        .any(|r| r.name == "y" && r.body.as_ref() == b"y:bad");
    if g.kind == Cluster && bad {
        Answer::Nack
    } else {
        Answer::Ack
    }
}

fn p30_nack_mid_plan_holds_back_what_depends_on_the_rejected_and_the_rest_goes_on<C: Client>() {
    // Two listeners: l -> r -> x, l2 -> r2 -> w; v is spare.
    let mesh = |y: Option<&'static str>, r: &'static str, r2: &'static str| {
        let mut clusters = vec![("w", "1"), ("v", "1")];
        match y {
            Some(content) => clusters.push(("y", content)),
            None => clusters.push(("x", "1")),
        }
        Mesh {
            clusters,
            routes: vec![("r", r), ("r2", r2)],
            listeners: vec![("l", "r"), ("l2", "r2")],
            ..Mesh::default()
        }
    };
    let mut envoy = Envoy::<C>::start(Ordering::default(), mesh(None, "x", "w").snapshot());
    envoy.answer = nack_bad_y;
    // One edit: r cuts over from x to y (which the proxy rejects), x removed; and r2 moves
    // from w to v, which does not depend on y.
    envoy
        .client
        .snapshot(mesh(Some("bad"), "y", "v").snapshot());
    envoy.run(Instant::now());
    let t = envoy.trace();
    let route_to = |envoy: &Envoy<C>, route: &str| -> Vec<String> {
        envoy.proxy.have[&Route][route]
            .refers_to(Cluster)
            .map(str::to_string)
            .collect()
    };
    assert_eq!(
        route_to(&envoy, "r"),
        ["x"],
        "r must not move to the rejected y: {t:?}"
    );
    assert_eq!(route_to(&envoy, "r2"), ["v"], "the rest goes on: {t:?}");
    assert!(envoy.first(removes("x")).is_none(), "{t:?}");
    assert!(envoy
        .client
        .events()
        .contains(&Event::Plan(PlanEvent::Stopped {
            step: 1,
            kind: Cluster
        })));
    // A later edit that does not fix y (r2 back to w): r still stays on x.
    envoy
        .client
        .snapshot(mesh(Some("bad"), "y", "w").snapshot());
    envoy.run(Instant::now());
    assert_eq!(route_to(&envoy, "r"), ["x"], "{:?}", envoy.trace());
    assert_eq!(route_to(&envoy, "r2"), ["w"], "{:?}", envoy.trace());
    assert!(envoy.holds(Cluster).contains(&"x".to_string()));
    // The fix: r moves, then x goes.
    envoy.log.clear();
    envoy
        .client
        .snapshot(mesh(Some("good"), "y", "w").snapshot());
    envoy.run(Instant::now());
    let t = envoy.trace();
    let rds = envoy.first(sends(Route, "r")).expect("the route moves");
    let remove_x = envoy.first(removes("x")).expect("x removed");
    assert!(rds < remove_x, "{t:?}");
    assert_eq!(route_to(&envoy, "r"), ["y"]);
    assert_eq!(envoy.holds(Cluster), ["v", "w", "y"], "{t:?}");
    assert_eq!(envoy.client.plan(), None);
}

fn p30_newer_snapshot_mid_plan_replaces_the_rest<C: Client>() {
    let mut envoy = Envoy::<C>::start(Ordering::default(), base().snapshot());
    // Cut over to y, but the client is slow with its CDS ACK...
    envoy.answer = silent_on_cds;
    envoy.client.snapshot(
        Mesh {
            clusters: vec![("y", "1")],
            routes: vec![("r", "y")],
            ..base()
        }
        .snapshot(),
    );
    envoy.run(Instant::now());
    let cds = envoy
        .log
        .iter()
        .rev()
        .find(|g| g.kind == Cluster)
        .cloned()
        .expect("CDS out");
    // ... and meanwhile the route is pointed at z instead.
    envoy.client.snapshot(
        Mesh {
            clusters: vec![("z", "1")],
            routes: vec![("r", "z")],
            ..base()
        }
        .snapshot(),
    );
    envoy.answer = ack_all;
    envoy.ack(&cds);
    envoy.run(Instant::now());
    let t = envoy.trace();
    let to_y = envoy.log.iter().any(|g| {
        g.kind == Route
            && g.resources
                .iter()
                .any(|r| r.refers_to(Cluster).any(|c| c == "y"))
    });
    assert!(!to_y, "the stale step (route to y) was sent: {t:?}");
    let rds = envoy.first(sends(Route, "r")).expect("RDS to z");
    let remove_x = envoy.first(removes("x")).expect("x removed");
    assert!(rds < remove_x, "{t:?}");
    assert_eq!(envoy.holds(Cluster), ["z"], "{t:?}");
    assert!(envoy
        .client
        .events()
        .contains(&Event::Plan(PlanEvent::Replaced { step: 1 })));
}

fn p30_silent_client_gets_the_next_step_after_the_time_out<C: Client>() {
    let mut envoy = Envoy::<C>::start(Ordering::default(), base().snapshot());
    envoy.answer = silent_on_cds;
    let t0 = Instant::now();
    envoy.client.snapshot(
        Mesh {
            clusters: vec![("x", "1"), ("y", "1")],
            routes: vec![("r", "y")],
            ..base()
        }
        .snapshot(),
    );
    envoy.run(t0);
    assert!(
        envoy.first(sends(Route, "r")).is_none(),
        "{:?}",
        envoy.trace()
    );
    let due = envoy.client.timeout().expect("a step time-out");
    assert_eq!(due, t0 + DEFAULT_STEP_TIMEOUT);
    envoy.run(due - Duration::from_millis(1));
    assert!(envoy.first(sends(Route, "r")).is_none());
    // Past the bound the next step goes out anyway, though (for all the server knows) y may
    // still be warming: the documented limit of a silent client, caught by the simulation.
    let caught = envoy.try_run(due);
    assert!(caught.is_err());
    assert!(
        envoy.first(sends(Route, "r")).is_some(),
        "{:?}",
        envoy.trace()
    );
    assert!(envoy
        .client
        .events()
        .iter()
        .any(|e| matches!(e, Event::Plan(PlanEvent::TimedOut { step: 1, .. }))));
}

fn p30_endpoints_only_change_is_one_response_and_no_plan<C: Client>() {
    let mut envoy = Envoy::<C>::start(Ordering::default(), base().snapshot());
    envoy.client.snapshot(
        Mesh {
            clusters: vec![("x", "1")],
            ..base()
        }
        .snapshot(),
    );
    envoy.client.events();
    // Only the endpoints of x change (cluster content "1" stays; its CLA changes).
    let items: Vec<_> = [
        res(Cluster, "x", "1", &[]),
        res(Endpoint, "x", "2", &[]),
        res(Route, "r", "", &[(Cluster, "x")]),
        res(Listener, "l", "", &[(Route, "r")]),
    ]
    .into();
    envoy
        .client
        .snapshot(Arc::new(Snapshot::from_resources(&items)));
    envoy.run(Instant::now());
    assert_eq!(envoy.trace(), ["EDS[\"x\"]"]);
    assert_eq!(envoy.client.plan(), None);
    assert!(!envoy
        .client
        .events()
        .iter()
        .any(|e| matches!(e, Event::Plan(_))));
}

fn p30_ordering_off_sends_everything_at_once<C: Client>() {
    let mut envoy = Envoy::<C>::start(Ordering::off(), base().snapshot());
    envoy.answer = silent_on_cds;
    envoy.client.snapshot(
        Mesh {
            clusters: vec![("y", "1")],
            routes: vec![("r", "y")],
            ..base()
        }
        .snapshot(),
    );
    // Without ordering x goes while the route still names it, and the route moves to y
    // while y's CDS is unanswered: the simulated proxy catches it (the check can fail).
    let result = envoy.try_run(Instant::now());
    assert!(result.is_err(), "{:?}", envoy.trace());
    assert_eq!(envoy.client.plan(), None);
}

/// A random mesh of up to four clusters, two routes and two listeners, every reference to
/// something in it.
fn random_mesh(rand: &mut impl FnMut(u64) -> u64, with_bad: bool) -> Mesh {
    const VERSIONS: [&str; 2] = ["1", "2"];
    let mut clusters = Vec::new();
    for c in ["c1", "c2", "c3", "c4"] {
        if rand(3) > 0 {
            let bad = with_bad && rand(8) == 0;
            clusters.push((
                c,
                if bad {
                    "bad"
                } else {
                    VERSIONS[rand(2) as usize]
                },
            ));
        }
    }
    let mut routes = Vec::new();
    for r in ["r1", "r2"] {
        if !clusters.is_empty() && rand(4) > 0 {
            routes.push((r, clusters[rand(clusters.len() as u64) as usize].0));
        }
    }
    let mut listeners = Vec::new();
    for l in ["l1", "l2"] {
        if !routes.is_empty() && rand(4) > 0 {
            listeners.push((l, routes[rand(routes.len() as u64) as usize].0));
        }
    }
    Mesh {
        clusters,
        routes,
        listeners,
        ..Mesh::default()
    }
}

/// Whether a CDS response brings a cluster the simulated Envoy rejects (content `bad`).
fn brings_bad(g: &Got) -> bool {
    g.kind == Cluster && g.resources.iter().any(|r| r.body.ends_with(b":bad"))
}

/// The model's proxy: NACKs (whole) CDS responses with a bad cluster, ACKs the rest.
fn model_answer(g: &Got) -> Answer {
    if brings_bad(g) {
        Answer::Nack
    } else {
        Answer::Ack
    }
}

/// The same, but slow to ACK good CDS responses (as Envoy while new clusters warm).
fn model_answer_slow(g: &Got) -> Answer {
    match model_answer(g) {
        Answer::Ack if g.kind == Cluster => Answer::Silence,
        other => other,
    }
}

/// Over random snapshot sequences (some arriving mid-plan, some with a client slow to ACK
/// CDS, some with clusters the client rejects), the simulated Envoy never holds a listener
/// whose route names a cluster it lacks or that is still warming (P29), and it ends holding
/// exactly the last snapshot (which it accepts).
fn p29_p30_model_a_simulated_envoy_never_routes_to_a_cluster_it_lacks<C: Client>() {
    let nacks = std::cell::Cell::new(0);
    crate::testing::on_tapes(200, |rand| nacks.set(nacks.get() + model_run::<C>(rand)));
    assert!(
        nacks.get() > 20,
        "the model rejected too few responses to mean much: {}",
        nacks.get()
    );
}

/// One run of the model, every choice from `rand`; panics on a violation. Returns how many
/// responses the proxy rejected.
fn model_run<C: Client>(mut rand: &mut dyn FnMut(u64) -> u64) -> usize {
    let first = random_mesh(&mut rand, false);
    let mut envoy = Envoy::<C>::start(Ordering::default(), first.snapshot());
    let mut now = Instant::now();
    for _step in 0..8 {
        envoy
            .client
            .snapshot(random_mesh(&mut rand, true).snapshot());
        // Sometimes the client sits on its CDS ACK until the next snapshot arrives.
        let slow = rand(4) == 0;
        envoy.answer = if slow {
            model_answer_slow
        } else {
            model_answer
        };
        envoy.run(now);
        if slow {
            // Answer what it sat on (if it was not rejected), then let the rest flow.
            envoy.answer = model_answer;
            let sat_on = envoy.log.iter().rev().find(|g| g.kind == Cluster).cloned();
            if let Some(cds) = sat_on.filter(|g| !brings_bad(g)) {
                envoy.ack(&cds);
            }
            envoy.run(now);
        }
        now += Duration::from_millis(10);
    }
    let nacks = envoy.log.iter().filter(|g| brings_bad(g)).count();
    let last = random_mesh(&mut rand, false);
    envoy.client.snapshot(last.snapshot());
    envoy.answer = model_answer;
    envoy.run(now);
    assert_eq!(envoy.client.plan(), None, "every plan ends");
    let expect = last.snapshot();
    for kind in [Cluster, Listener, Route] {
        let mut want: Vec<String> = expect.get(kind).resources.keys().cloned().collect();
        if kind == Route {
            // Envoy asks only for the route configurations its listeners name.
            let named: BTreeSet<&str> = last.listeners.iter().map(|(_, r)| *r).collect();
            want.retain(|r| named.contains(r.as_str()));
        }
        assert_eq!(
            envoy.holds(kind),
            want,
            "{kind} converges to the last snapshot; rejected {:?}; responses {:?}",
            envoy.client.rejected(),
            envoy.trace()
        );
    }
    nacks
}

mod every_type;
mod interleavings;

// === the steps themselves ===

#[test]
fn p30_steps_are_shared_and_equal_steps_are_left_out() {
    let old = base().snapshot();
    let new = Mesh {
        clusters: vec![("y", "1")],
        routes: vec![("r", "y")],
        ..base()
    }
    .snapshot();
    let (s, end) = steps(&old, &new);
    // Step 1: clusters x and y; step 2: the route moved, x still there; then `new`.
    assert_eq!(s.len(), 2);
    assert!(
        Arc::ptr_eq(&end, &new),
        "the end is the new snapshot itself"
    );
    let names = |snap: &Snapshot, kind| -> Vec<String> {
        snap.get(kind).resources.keys().cloned().collect()
    };
    assert_eq!(names(&s[0], Cluster), ["x", "y"]);
    assert_eq!(s[0].get(Route).version, old.get(Route).version);
    assert_eq!(names(&s[1], Cluster), ["x", "y"]);
    assert_eq!(s[1].get(Route).version, new.get(Route).version);
    // Memoized: the same steps (not copies) for the next stream of the group.
    let (again, _) = steps(&old, &new);
    assert!(s.iter().zip(&again).all(|(a, b)| Arc::ptr_eq(a, b)));
    // Nothing to order: no steps.
    assert!(steps(&old, &Arc::clone(&old)).0.is_empty());
}

/// "Remove what nothing in the new snapshot references": a cluster deleted in one edit while
/// a route still names it stays until an edit moves the route.
#[test]
fn p30_a_removed_cluster_that_a_route_still_names_stays() {
    let old = Mesh {
        clusters: vec![("x", "1"), ("y", "1")],
        ..base()
    }
    .snapshot();
    // The first edit deletes x, but r still routes to x.
    let deleted = Mesh {
        clusters: vec![("y", "1")],
        ..base()
    }
    .snapshot();
    let (s, end) = steps(&old, &deleted);
    assert!(s.is_empty());
    let clusters: Vec<_> = end.get(Cluster).resources.keys().cloned().collect();
    assert_eq!(clusters, ["x", "y"], "x stays while r names it");
    assert!(
        end.get(Endpoint).resources.contains_key("x"),
        "and its endpoints"
    );
    // The second edit moves r: x goes, after the route.
    let moved = Mesh {
        clusters: vec![("y", "1")],
        routes: vec![("r", "y")],
        ..base()
    }
    .snapshot();
    let (s, end) = steps(&end, &moved);
    assert!(Arc::ptr_eq(&end, &moved));
    assert_eq!(s.len(), 1, "the route, then the removal");
    assert!(s[0].get(Cluster).resources.contains_key("x"));
}

#[test]
fn p30_a_finished_plan_frees_its_snapshots() {
    // The memo must not keep snapshots alive (the steps hold no `new`).
    let old = base().snapshot();
    let new = Mesh {
        clusters: vec![("y", "1")],
        routes: vec![("r", "y")],
        ..base()
    }
    .snapshot();
    let weak = Arc::downgrade(&new);
    let planned = steps(&old, &new);
    drop(new);
    drop(planned);
    assert!(
        weak.upgrade().is_none(),
        "a snapshot leaked through its plan memo"
    );
}

// === per-type streams ===

#[test]
fn p30_per_type_cds_keeps_a_removed_cluster_while_the_route_stream_names_it() {
    let mut cds = SotwStream::new(Variant::Single(Cluster));
    cds.handle_snapshot(base().snapshot());
    let request = |version: &str, nonce: &str| DiscoveryRequest {
        version_info: version.into(),
        node: Some(node()),
        type_url: Cluster.type_url().into(),
        response_nonce: nonce.into(),
        ..Default::default()
    };
    cds.handle_request(request("", "")).expect("ok");
    let first = cds.poll_response(Instant::now()).expect("CDS");
    cds.handle_request(request(&first.version, &first.nonce))
        .expect("ack");
    // The node's RDS stream still routes to x.
    let x: BTreeSet<_> = [(Cluster, "x".to_string())].into();
    cds.handle_peer_references(Arc::new(x));
    let cut_over = Mesh {
        clusters: vec![("y", "1")],
        routes: vec![("r", "y")],
        ..base()
    };
    cds.handle_snapshot(cut_over.snapshot());
    let both = cds.poll_response(Instant::now()).expect("CDS with y");
    let names: Vec<_> = both.resources.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, ["x", "y"], "x stays while the route names it");
    cds.handle_request(request(&both.version, &both.nonce))
        .expect("ack");
    assert!(cds.poll_response(Instant::now()).is_none());
    // The route stream ACKed the route to y: x goes.
    cds.handle_peer_references(Arc::default());
    let only_y = cds.poll_response(Instant::now()).expect("CDS without x");
    let names: Vec<_> = only_y.resources.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, ["y"]);
}

#[test]
fn p30_per_type_stream_references_cover_what_is_accepted_and_in_flight() {
    let mut rds = SotwStream::new(Variant::Single(Route));
    rds.handle_snapshot(base().snapshot());
    let request = |version: &str, nonce: &str| DiscoveryRequest {
        version_info: version.into(),
        node: Some(node()),
        resource_names: vec!["r".into()],
        type_url: Route.type_url().into(),
        response_nonce: nonce.into(),
        ..Default::default()
    };
    let clusters = |s: &SotwStream| -> Vec<String> {
        let (_, refs) = s.references().expect("a per-type stream");
        refs.into_iter()
            .filter(|(k, _)| *k == Cluster)
            .map(|(_, n)| n)
            .collect()
    };
    rds.handle_request(request("", "")).expect("ok");
    let first = rds.poll_response(Instant::now()).expect("RDS");
    assert_eq!(clusters(&rds), ["x"], "in flight");
    rds.handle_request(request(&first.version, &first.nonce))
        .expect("ack");
    rds.handle_snapshot(
        Mesh {
            clusters: vec![("y", "1")],
            routes: vec![("r", "y")],
            ..base()
        }
        .snapshot(),
    );
    let moved = rds.poll_response(Instant::now()).expect("RDS to y");
    assert_eq!(clusters(&rds), ["x", "y"], "accepted and in flight");
    rds.handle_request(request(&moved.version, &moved.nonce))
        .expect("ack");
    assert_eq!(clusters(&rds), ["y"], "accepted");
    assert!(SotwStream::new(Variant::Aggregated).references().is_none());
}

// === P34: LEDS in make-before-break ===

/// A client as `step_done` sees it: what it holds and subscribes to, nothing in flight.
struct Holds {
    held: BTreeSet<(ResourceType, String, String)>,
    subscribed: BTreeSet<(ResourceType, String)>,
}

impl super::Progress for Holds {
    fn in_flight(&self, _: ResourceType) -> bool {
        false
    }
    fn holds(&self, kind: ResourceType, name: &str, version: &str) -> bool {
        self.held
            .contains(&(kind, name.to_string(), version.to_string()))
    }
    fn subscribes(&self, kind: ResourceType, name: &str) -> bool {
        self.subscribed.contains(&(kind, name.to_string()))
    }
    fn requested(&self, _: ResourceType) -> bool {
        true
    }
}

#[test]
fn p34_p30_a_new_cluster_s_leds_members_go_first_and_the_step_waits_for_them() {
    use ResourceType::LbEndpoint;
    let glob = "xdstp://t/envoy.config.endpoint.v3.LbEndpoint/c1/*";
    let member = res(
        LbEndpoint,
        "xdstp://t/envoy.config.endpoint.v3.LbEndpoint/c1/h1",
        "1",
        &[],
    );
    let base = Mesh {
        clusters: vec![("c0", "1")],
        routes: vec![("r", "c0")],
        listeners: vec![("l", "r")],
        ..Mesh::default()
    };
    let mut items: Vec<Arc<Resource>> = Vec::new();
    for kind in ResourceType::ALL {
        items.extend(base.snapshot().get(kind).resources.values().cloned());
    }
    let base = Arc::new(Snapshot::from_resources(&items));
    // The route moves to a new cluster c1, whose endpoints come by LEDS.
    items.retain(|r| r.kind != Route);
    items.push(res(Route, "r", "", &[(Cluster, "c1")]));
    items.push(res(Cluster, "c1", "1", &[]));
    items.push(res(Endpoint, "c1", "1", &[(LbEndpoint, glob)]));
    items.push(Arc::clone(&member));
    let new = Arc::new(Snapshot::from_resources(&items));
    let (plan, _) = steps(&base, &new);
    let first = plan.first().expect("a plan: the route waits for c1");
    assert!(
        first.get(LbEndpoint).resources.contains_key(&member.name),
        "the member goes with the endpoints"
    );
    assert!(
        first.get(Route).resources["r"]
            .references
            .contains(&(Cluster, "c0".into())),
        "the route still as it was"
    );
    // The client holds c1 and its ClusterLoadAssignment and subscribes to the collection:
    // the step is done only once it holds the member too.
    let (c1, cla) = (
        &first.get(Cluster).resources["c1"],
        &first.get(Endpoint).resources["c1"],
    );
    let mut client = Holds {
        held: [
            (Cluster, c1.name.clone(), c1.version.clone()),
            (Endpoint, cla.name.clone(), cla.version.clone()),
        ]
        .into(),
        subscribed: [
            (Endpoint, "c1".to_string()),
            (LbEndpoint, member.name.clone()),
        ]
        .into(),
    };
    assert!(
        !super::step_done(&base, first, &client),
        "waits for the LEDS member"
    );
    client
        .held
        .insert((LbEndpoint, member.name.clone(), member.version.clone()));
    assert!(super::step_done(&base, first, &client));
}
