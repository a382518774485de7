//! Make-before-break (P28-P30): the steps from the snapshot a client was given to a newer one,
//! on an aggregated stream, and the planner that hands each step to the stream's types only
//! once the client has ACKed the one before.
//!
//! A plan is a short list of intermediate snapshots, each a whole [`Snapshot`] that the
//! stream's types serve as if it were the cache's; SotW and delta then send each step by their
//! own rules (full state, only what changed, removals). The steps from base `B` to new `N`:
//!
//! 1. secrets, clusters and ClusterLoadAssignments as the union of `B` and `N` (added and
//!    changed ones at their new versions, nothing removed yet); everything else as in `B`.
//!    These go out together: Envoy holds its CDS ACK until new clusters have warmed, and they
//!    warm only once their endpoints arrive, so EDS must not wait for that ACK.
//! 2. once step 1 is ACKed: listeners, runtimes and the other types as in `N`; route
//!    configurations, scoped routes, virtual hosts and extension configs as the union of `B`
//!    and `N` (what a listener still running may name stays).
//! 3. once step 2 is ACKed: `N` itself, which removes what nothing references any more
//!    (what `N` removes but still refers to stays, as `B` has it: [`steps`]).
//!
//! A step equal to the one before it is left out, so a change that crosses no dependency (the
//! common one: only endpoints, or only a cluster's settings) is a plan of one step, `N`
//! itself, which is no plan at all: the client gets exactly what it would without ordering.
//! Steps are computed once per (base, new) pair and shared by the streams of a node group
//! (memoized on the newer [`Snapshot`]).
//!
//! `B` is what the client may hold: what the stream serves now (a step of a plan a newer
//! snapshot interrupts, too), except that a CDS or LDS response in flight is what it brings
//! the client to, not a later target it was never sent. So nothing the client may be using
//! is removed early. Progress is what the client has completed (every response answered,
//! new clusters warm), not what was sent: a newer snapshot that arrives while a step is
//! pending makes a new plan whose first step is that pending step, still waited on, unless
//! what the new plan sends first only adds or changes secrets, clusters and endpoints (which
//! cannot make anything refer to what is not warm); a removal, or a route or listener change,
//! never goes past a step the client has not completed. A NACK does not stop the rest: what
//! refers, over the dependency graph ([`crate::resource::Resource::references`]), to what the
//! client rejected is held back at its `B` version, nothing is removed meanwhile, and the plan
//! goes on from where the client is ([`effective`]); that holds across later snapshots until
//! the client accepts a fix. Per-type streams are not planned; they only keep what the node's
//! other streams still refer to ([`Planner::handle_peer_references`]).
//!
//! Must not: send anything, or know SotW from delta (that is the stream core and its
//! flavors); time comes in only as `now`.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::Event;
use crate::cache::{PlanSteps, Snapshot, TypeSnapshot};
use crate::resource::{Reference, Resource, ResourceType};

use ResourceType::{
    Cluster, Endpoint, ExtensionConfig, LbEndpoint, Listener, Route, Runtime, ScopedRoute, Secret,
    VirtualHost,
};

/// How long a step waits for the client's ACKs before the next goes out anyway, by default.
pub const DEFAULT_STEP_TIMEOUT: Duration = Duration::from_secs(5);

/// Whether and how updates are ordered make-before-break on aggregated streams.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ordering {
    /// `false`: every new snapshot goes out at once (plain eventual consistency).
    pub enabled: bool,
    /// How long a step waits for the client's ACKs before the next goes out anyway.
    pub step_timeout: Duration,
}

impl Default for Ordering {
    fn default() -> Self {
        Ordering {
            enabled: true,
            step_timeout: DEFAULT_STEP_TIMEOUT,
        }
    }
}

impl Ordering {
    /// No ordering: each new snapshot is served whole at once.
    pub fn off() -> Ordering {
        Ordering {
            enabled: false,
            ..Ordering::default()
        }
    }
}

/// The steps from `base` to `new` (see the module docs): the steps before the end, and the
/// end, which is `new` itself unless `new` removes something it still refers to (a cluster
/// deleted in one edit while a route still names it): that stays, as `base` has it, until
/// nothing refers to it. No steps: the end can be served at once. Memoized on `new` per
/// `base`.
pub fn steps(base: &Arc<Snapshot>, new: &Arc<Snapshot>) -> (Vec<Arc<Snapshot>>, Arc<Snapshot>) {
    let found = new.plans.get(base).unwrap_or_else(|| {
        let computed = compute_steps(base, new);
        new.plans.put(base, Arc::clone(&computed));
        computed
    });
    let (steps, end) = &*found;
    (
        steps.clone(),
        end.clone().unwrap_or_else(|| Arc::clone(new)),
    )
}

fn compute_steps(base: &Arc<Snapshot>, new: &Arc<Snapshot>) -> PlanSteps {
    let end = still_referenced(base, new);
    let target = end.as_ref().unwrap_or(new);
    let union = |kind: ResourceType| union(base.get(kind), target.get(kind));
    let step1 = types_from(base, |kind| match kind {
        Secret | Cluster | Endpoint | LbEndpoint => Some(union(kind)),
        _ => None,
    });
    let step2 = types_from(&step1, |kind| match kind {
        Listener | Runtime => Some(Arc::clone(target.get(kind))),
        Route | ScopedRoute | VirtualHost | ExtensionConfig => Some(union(kind)),
        _ => None,
    });
    let mut steps: Vec<Arc<Snapshot>> = Vec::with_capacity(2);
    let mut last: &Snapshot = base;
    for step in [step1, step2] {
        if !step.same_as(last) {
            steps.push(Arc::new(step));
            last = steps.last().map_or(base, |s| &**s);
        }
    }
    if steps.last().is_some_and(|s| s.same_as(target)) {
        steps.pop();
    }
    Arc::new((steps, end))
}

/// `new`, plus what `base` has, `new` removes and `new` (or what is kept) still refers to;
/// `None` when nothing is. Linear in `new`'s references, and only looked for when `new`
/// removes something.
fn still_referenced(base: &Snapshot, new: &Snapshot) -> Option<Arc<Snapshot>> {
    let removes = ResourceType::ALL.iter().any(|&kind| {
        let (old, fresh) = (base.get(kind), new.get(kind));
        fresh
            .changes_since(old)
            .iter()
            .any(|name| !fresh.resources.contains_key(name))
    });
    if !removes {
        return None;
    }
    let gone = |(kind, name): &Reference| {
        !new.get(*kind).resources.contains_key(name) && base.get(*kind).resources.contains_key(name)
    };
    let mut wanted: Vec<Reference> = ResourceType::ALL
        .iter()
        .flat_map(|&kind| new.get(kind).resources.values())
        .flat_map(|r| r.references.iter())
        .filter(|r| gone(r))
        .cloned()
        .collect();
    let mut kept: BTreeMap<Reference, Arc<Resource>> = BTreeMap::new();
    while let Some(reference) = wanted.pop() {
        if kept.contains_key(&reference) {
            continue;
        }
        let Some(r) = base.get(reference.0).resources.get(&reference.1) else {
            continue;
        };
        wanted.extend(r.references.iter().filter(|x| gone(x)).cloned());
        kept.insert(reference, Arc::clone(r));
    }
    if kept.is_empty() {
        return None;
    }
    let types = ResourceType::ALL.map(|kind| {
        let mut mine = kept.iter().filter(|((k, _), _)| *k == kind).peekable();
        if mine.peek().is_none() {
            return Arc::clone(new.get(kind));
        }
        let mut resources = new.get(kind).resources.clone();
        resources.extend(mine.map(|((_, n), r)| (n.clone(), Arc::clone(r))));
        Arc::new(TypeSnapshot::new(resources))
    });
    Some(Arc::new(Snapshot::from_types(types)))
}

/// A snapshot whose types are `pick(kind)`, or `from`'s where it gives none.
fn types_from(
    from: &Snapshot,
    pick: impl Fn(ResourceType) -> Option<Arc<TypeSnapshot>>,
) -> Snapshot {
    Snapshot::from_types(
        ResourceType::ALL.map(|kind| pick(kind).unwrap_or_else(|| Arc::clone(from.get(kind)))),
    )
}

/// `new`'s resources plus those of `old` that `new` lacks: `new` itself when it removes
/// nothing (linear in what changed, thanks to the shared change lists).
fn union(old: &Arc<TypeSnapshot>, new: &Arc<TypeSnapshot>) -> Arc<TypeSnapshot> {
    let removes = new
        .changes_since(old)
        .iter()
        .any(|name| !new.resources.contains_key(name));
    if !removes {
        return Arc::clone(new);
    }
    let mut resources: BTreeMap<String, _> = new.resources.clone();
    for (name, r) in &old.resources {
        resources
            .entry(name.clone())
            .or_insert_with(|| Arc::clone(r));
    }
    Arc::new(TypeSnapshot::new(resources))
}

/// `new`, plus what `old` has and `new` removes that `references` names: `new` itself when
/// nothing is kept.
fn keep_referenced(
    old: &Arc<Snapshot>,
    new: &Arc<Snapshot>,
    references: &BTreeSet<Reference>,
) -> Arc<Snapshot> {
    let mut kept_any = false;
    let types = ResourceType::ALL.map(|kind| {
        let (old, new) = (old.get(kind), new.get(kind));
        let kept: Vec<_> = new
            .changes_since(old)
            .iter()
            .filter(|name| !new.resources.contains_key(*name))
            .filter(|name| references.contains(&(kind, (*name).clone())))
            .filter_map(|name| old.resources.get(name))
            .cloned()
            .collect();
        if kept.is_empty() {
            return Arc::clone(new);
        }
        kept_any = true;
        let mut resources = new.resources.clone();
        resources.extend(kept.into_iter().map(|r| (r.name.clone(), r)));
        Arc::new(TypeSnapshot::new(resources))
    });
    if kept_any {
        Arc::new(Snapshot::from_types(types))
    } else {
        Arc::clone(new)
    }
}

/// Resources a client rejected (NACKed), by type and name.
pub type Rejected = BTreeMap<Reference, Rejection>;

/// One rejected resource.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rejection {
    /// The version the client rejected.
    pub version: String,
    /// What the client had of that name before, and so still runs.
    pub previous: Previous,
}

/// What a client had of a name before a response it rejected.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Previous {
    Nothing,
    Had(Arc<Resource>),
    /// A version it listed on reconnecting (delta), whose content the server does not have.
    Unknown,
}

/// `base` as the client may really run it: where it has a version the client rejected and
/// `new` no longer asks for, the version the client kept instead (or nothing, if it had
/// none). Planning from it, what the client rejected is never sent again, while what it
/// still runs stays until the plan removes it in order.
fn scrub(base: &Arc<Snapshot>, new: &Snapshot, rejected: &Rejected) -> Arc<Snapshot> {
    let stale = |((kind, name), r): &(&Reference, &Rejection)| {
        let in_base = base.get(*kind).resources.get(name);
        let in_new = new.get(*kind).resources.get(name);
        r.previous != Previous::Unknown
            && in_base.is_some_and(|b| b.version == r.version)
            && in_new.is_none_or(|n| n.version != r.version)
    };
    let stale: Vec<_> = rejected.iter().filter(stale).collect();
    if stale.is_empty() {
        return Arc::clone(base);
    }
    let types = ResourceType::ALL.map(|kind| {
        let mut mine = stale.iter().filter(|((k, _), _)| *k == kind).peekable();
        if mine.peek().is_none() {
            return Arc::clone(base.get(kind));
        }
        let mut resources = base.get(kind).resources.clone();
        for ((_, name), r) in mine {
            match &r.previous {
                Previous::Had(previous) => resources.insert(name.clone(), Arc::clone(previous)),
                Previous::Nothing | Previous::Unknown => resources.remove(name),
            };
        }
        Arc::new(TypeSnapshot::new(resources))
    });
    Arc::new(Snapshot::from_types(types))
}

/// What a stream serves while its client has rejected resources that `new` still has at the
/// rejected version: `new`, except that what refers to them (transitively: the route that
/// names a rejected cluster, the listener that names that route) stays as in `base` (or
/// absent, if new), and nothing that may be referred to is removed (the client may still run
/// older versions that name it). With how many resources were held back. `new` itself when
/// nothing it has was rejected.
pub fn effective(
    new: &Arc<Snapshot>,
    base: &Arc<Snapshot>,
    rejected: &Rejected,
) -> (Arc<Snapshot>, usize) {
    let mut blocked: BTreeSet<Reference> = rejected
        .iter()
        .filter(|((kind, name), rejection)| {
            new.get(*kind)
                .resources
                .get(name)
                .is_some_and(|r| r.version == rejection.version)
        })
        .map(|(r, _)| r.clone())
        .collect();
    if blocked.is_empty() {
        return (Arc::clone(new), 0);
    }
    let mut held: BTreeSet<Reference> = BTreeSet::new();
    loop {
        let before = held.len();
        for kind in ResourceType::ALL {
            for r in new.get(kind).resources.values() {
                if r.references.iter().any(|x| blocked.contains(x)) {
                    held.insert((kind, r.name.clone()));
                }
            }
        }
        if held.len() == before {
            break;
        }
        blocked.extend(held.iter().cloned());
    }
    let types = ResourceType::ALL.map(|kind| {
        let (old, fresh) = (base.get(kind), new.get(kind));
        let kept = match kind {
            Listener | Runtime => Arc::clone(fresh),
            _ => union(old, fresh),
        };
        let mut mine = held.iter().filter(|(k, _)| *k == kind).peekable();
        if mine.peek().is_none() {
            return kept;
        }
        let mut resources = kept.resources.clone();
        for (_, name) in mine {
            match old.resources.get(name) {
                Some(r) => resources.insert(name.clone(), Arc::clone(r)),
                None => resources.remove(name),
            };
        }
        Arc::new(TypeSnapshot::new(resources))
    });
    (Arc::new(Snapshot::from_types(types)), held.len())
}

/// Where a stream's plan stands, for operators (`/status`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlanStatus {
    /// The step being served, from 1.
    pub step: usize,
    pub steps: usize,
    /// When the plan started (the first response decision after the snapshot arrived).
    pub since: Option<Instant>,
    /// How many resources the plan holds back because they refer (directly or not) to
    /// something the client rejected, and the type of the latest NACK.
    pub held_back: usize,
    pub nacked: Option<ResourceType>,
}

/// Something that happened to a stream's update plan (for logs and metrics).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PlanEvent {
    /// A new snapshot needs `steps` ordered steps.
    Started { steps: usize },
    /// The client ACKed a step; `step` (from 1) goes out now.
    Advanced { step: usize, steps: usize },
    /// The client did not ACK step `step` within the bound: the next goes out anyway.
    TimedOut { step: usize, waited: Duration },
    /// The client NACKed `kind` during step `step`: what refers to the rejected resources is
    /// held back (the proxy keeps what it accepted), and the rest of the plan goes on.
    Stopped { step: usize, kind: ResourceType },
    /// A newer snapshot arrived during step `step`; a new plan replaces the rest.
    Replaced { step: usize },
    /// Every step was served and ACKed (or timed out); `took`: since the plan began, or the
    /// first of the plans it replaced (overlapping edits) did.
    Completed { steps: usize, took: Duration },
    /// A proxy back on a new stream said what it holds of `kind`: content of a recent
    /// generation (`ordered`: the update to the newest goes make-before-break from it), or
    /// content this server does not keep (it gets the newest at once, unordered).
    Reconnected { kind: ResourceType, ordered: bool },
}

/// One plan in progress.
#[derive(Debug)]
struct Plan {
    /// The steps before `new`.
    steps: Vec<Arc<Snapshot>>,
    /// The last step: the cache's snapshot.
    new: Arc<Snapshot>,
    /// Index of the step being served (`steps.len()`: `new`).
    step: usize,
    /// When the plan and the current step began: set on the first poll after they did.
    began: Option<Instant>,
    step_began: Option<Instant>,
    held_back: usize,
    nacked: Option<ResourceType>,
}

/// Which snapshot a stream's types serve: the cache's newest, or a step of a plan towards it.
#[derive(Debug, Default)]
pub struct Planner {
    ordering: Ordering,
    /// The stream is aggregated: its types can be ordered against each other.
    ordered: bool,
    /// What the types serve now.
    target: Option<Arc<Snapshot>>,
    /// The latest target the client has completed: every response of it ACKed (or
    /// answered) and its new clusters warm, or whose wait timed out. `None`: nothing yet.
    /// While `target` is another, what it sent is pending: a newer snapshot does not go past
    /// it unless what goes first is safe over it ([`safe_over_pending`]).
    confirmed: Option<Arc<Snapshot>>,
    /// Per type whose whole set is in flight (a response to a wildcard, or LDS and CDS: P10),
    /// what that response brings the client to: a newer target cannot go out on the type
    /// until the client answers, so a plan made meanwhile starts from what the client may
    /// hold, not from a target it was never sent (whose union with the next would keep, and
    /// later send, resources that no snapshot has any more). A type not in flight is sent its
    /// target at once; and of what clients ask for by name, a resource no one names is never
    /// sent, so those targets stand (a cluster's ClusterLoadAssignment with it). Only on
    /// ordered streams; in [`ResourceType::ALL`] order.
    held: [Option<Arc<TypeSnapshot>>; ResourceType::ALL.len()],
    /// The client came back from an earlier stream saying what it holds
    /// ([`Planner::handle_held`]): listeners and routes wait for its CDS request.
    reconnected: bool,
    /// On a stream of a client back from an earlier one, the types (one bit each) that name
    /// clusters: nothing of them is sent until the client has asked for clusters and
    /// completed what the types serve (or a step's time-out), so that they do not name a
    /// cluster still warming there (what it holds of them may be unknown, or new to it).
    /// Since when.
    withheld: u16,
    withheld_since: Option<Instant>,
    /// The types (one bit each) a client back from an earlier stream claimed content of that
    /// the server does not keep, not sent on this stream yet: what it holds of them is
    /// unknown, so it gets the newest of them at once. A plan made meanwhile starts those
    /// types from the newest too (not from a target it was never sent: a whole set of that
    /// would remove what the client may hold and the newest has).
    unknown: u16,
    /// A client back from an earlier stream, until it has completed what it was sent once
    /// `withheld` ended (the routes that moved off what it held among them): removals of
    /// what it claims at versions the server does not keep wait till then
    /// ([`Planner::defers_removal_of`]), and so does a plan's step that removes (what those
    /// may name).
    settling: bool,
    /// While settling, removals deferred so far go in the order that keeps what names them
    /// first: of the types whose [`removal_rank`] is below this (listeners first, then what
    /// they name, down to endpoints), one rank more each time the client has completed what
    /// it was sent.
    released: u8,
    /// Whether anything was sent on this stream: until then the client holds only what it
    /// claimed (`confirmed`), if anything, and nothing of a target is pending.
    sent_any: bool,
    plan: Option<Plan>,
    /// The cache's newest snapshot.
    newest: Option<Arc<Snapshot>>,
    /// Per-type streams: what the node's other streams still refer to (removals of those
    /// wait).
    peer_references: Arc<BTreeSet<Reference>>,
}

/// What the planner needs to know of the client to tell a step is done.
pub trait Progress {
    /// Whether a response of `kind` is out and unanswered.
    fn in_flight(&self, kind: ResourceType) -> bool;
    /// Whether the client holds this resource at this version, as far as the server knows
    /// (sent, and not rejected).
    fn holds(&self, kind: ResourceType, name: &str, version: &str) -> bool;
    /// [`Progress::holds`] of `resource`, one of `snapshot`'s (the same answer; a client
    /// may know it without looking the name up).
    fn holds_of(&self, kind: ResourceType, snapshot: &TypeSnapshot, resource: &Resource) -> bool {
        let _ = snapshot;
        self.holds(kind, &resource.name, &resource.version)
    }
    /// Whether the client holds every resource of `snapshot` it subscribes to, known
    /// without a look at any name (see `Flavor::holds_all`); `false` when not known so.
    fn holds_all(&self, kind: ResourceType, snapshot: &TypeSnapshot) -> bool {
        let _ = (kind, snapshot);
        false
    }
    /// Whether the client subscribes to the resource of this name.
    fn subscribes(&self, kind: ResourceType, name: &str) -> bool;
    /// Whether the client has asked for `kind` on this stream.
    fn requested(&self, kind: ResourceType) -> bool;
}

impl Plan {
    fn len(&self) -> usize {
        self.steps.len() + 1
    }

    fn snapshot(&self, step: usize) -> &Arc<Snapshot> {
        self.steps.get(step).unwrap_or(&self.new)
    }
}

/// A snapshot with no resources, one shared by all: what a client that was given nothing
/// holds.
fn nothing() -> &'static Arc<Snapshot> {
    static NOTHING: std::sync::OnceLock<Arc<Snapshot>> = std::sync::OnceLock::new();
    NOTHING.get_or_init(|| {
        Arc::new(Snapshot::from_types(
            ResourceType::ALL.map(|_| TypeSnapshot::empty()),
        ))
    })
}

impl Planner {
    /// A planner for a stream; `ordered`: an aggregated stream.
    pub fn new(ordering: Ordering, ordered: bool) -> Planner {
        Planner {
            ordering,
            ordered: ordered && ordering.enabled,
            ..Planner::default()
        }
    }

    /// Whether the stream orders its updates (aggregated, ordering on).
    pub fn ordered(&self) -> bool {
        self.ordered
    }

    /// The snapshot the types serve now.
    pub fn target(&self) -> Option<&Arc<Snapshot>> {
        self.target.as_ref()
    }

    /// The newest snapshot the stream was given (a plan's last step), if any.
    pub fn newest(&self) -> Option<&Arc<Snapshot>> {
        self.newest.as_ref().or(self.target.as_ref())
    }

    /// Where the plan stands, if one is in progress.
    pub fn status(&self) -> Option<PlanStatus> {
        self.plan.as_ref().map(|p| PlanStatus {
            step: p.step + 1,
            steps: p.len(),
            since: p.began,
            held_back: p.held_back,
            nacked: p.nacked,
        })
    }

    /// Whether what the types serve now went out and the client has not completed it yet.
    fn pending(&self) -> bool {
        match (&self.target, &self.confirmed) {
            (Some(target), Some(confirmed)) => !Arc::ptr_eq(target, confirmed),
            (Some(_), None) => true,
            (None, _) => false,
        }
    }

    /// What the client has completed: the base the step being served waits on.
    fn completed(&self) -> &Arc<Snapshot> {
        self.confirmed.as_ref().unwrap_or_else(|| nothing())
    }

    /// A response of `kind` went out: it brings the client to what `kind` serves now
    /// (`whole`: it carried the client's whole set of the type, P10).
    pub fn sent(&mut self, kind: ResourceType, whole: bool) {
        self.sent_any = true;
        self.unknown &= !(1 << kind.index());
        let (Some(target), true, true) = (&self.target, whole, self.ordered) else {
            return;
        };
        self.held[kind.index()] = Some(Arc::clone(target.get(kind)));
    }

    /// The client answered the response of `kind` in flight (after the planner took in what
    /// the answer means).
    pub fn answered(&mut self, kind: ResourceType) {
        self.held[kind.index()] = None;
    }

    /// What the client may hold: per type, what the response in flight brings it to, or
    /// (none in flight) `target`'s.
    fn holding(&self, target: &Arc<Snapshot>) -> Arc<Snapshot> {
        if self.held.iter().all(Option::is_none) && self.withheld == 0 {
            return Arc::clone(target);
        }
        let differs = |kind: ResourceType| {
            // A withheld type was not sent: the client has what it completed.
            let held = if self.withholds(kind) {
                Some(self.completed().get(kind))
            } else {
                self.held[kind.index()].as_ref()
            };
            held.filter(|h| {
                let t = target.get(kind);
                !Arc::ptr_eq(h, t) && h.version != t.version
            })
        };
        if !ResourceType::ALL.iter().any(|&k| differs(k).is_some()) {
            return Arc::clone(target);
        }
        let types = ResourceType::ALL.map(|k| Arc::clone(differs(k).unwrap_or(target.get(k))));
        Arc::new(Snapshot::from_types(types))
    }

    /// A client back on a new stream holds `held` of `kind` (found among recent generations;
    /// `None`: content this server does not keep), before anything of `kind` was sent on this
    /// stream. It holds that, completed: the plan to the newest starts from it, so a route
    /// that names a cluster the proxy does not hold waits until that cluster is warm, and
    /// what the proxy may still use is removed last, as for an edit on a live stream.
    pub fn handle_held(
        &mut self,
        kind: ResourceType,
        held: Option<Arc<TypeSnapshot>>,
        rejected: &Rejected,
        events: &mut VecDeque<Event>,
    ) {
        let Some(target) = self.target.clone().filter(|_| self.ordered) else {
            return;
        };
        self.reconnected = true;
        self.settling = true;
        self.released = 0;
        // Until what it holds of clusters is known and it has completed what CDS serves,
        // nothing that names clusters goes: a listener or route it is sent (new to it, or
        // unknown) could name a cluster still warming there.
        for kind in [Listener, Route, ScopedRoute, VirtualHost] {
            self.withheld |= 1 << kind.index();
        }
        events.push_back(Event::Plan(PlanEvent::Reconnected {
            kind,
            ordered: held.is_some(),
        }));
        let Some(held) = held else {
            self.unknown |= 1 << kind.index();
            // A plan made from what it holds of other types took this one as held empty:
            // made again, it starts this one from the newest.
            if self.plan.is_some() {
                let replaced = self.plan.take();
                let why = Replan::Newer {
                    began: replaced.as_ref().and_then(|p| p.began),
                    step_began: replaced.and_then(|p| p.step_began),
                };
                self.replan(rejected, why, events);
            }
            return;
        };
        let with_held = |s: &Snapshot| {
            Arc::new(Snapshot::from_types(
                ResourceType::ALL.map(|k| Arc::clone(if k == kind { &held } else { s.get(k) })),
            ))
        };
        // What it holds is what a later plan starts from, even where it is what it is to
        // have now (a newer snapshot may come before its other types are known).
        self.confirmed = Some(with_held(self.completed()));
        if held.version == target.get(kind).version {
            return;
        }
        self.target = Some(with_held(&target));
        let replaced = self.plan.take();
        let why = Replan::Newer {
            began: replaced.as_ref().and_then(|p| p.began),
            step_began: replaced.and_then(|p| p.step_began),
        };
        self.replan(rejected, why, events);
    }

    /// A new snapshot from the cache; `rejected`: what the client has rejected so far.
    pub fn handle_snapshot(
        &mut self,
        new: Arc<Snapshot>,
        rejected: &Rejected,
        events: &mut VecDeque<Event>,
    ) {
        self.newest = Some(new);
        if !self.ordered {
            self.retarget_unordered();
            return;
        }
        let replaced = self.plan.take();
        if let Some(plan) = &replaced {
            events.push_back(Event::Plan(PlanEvent::Replaced {
                step: plan.step + 1,
            }));
        }
        let why = Replan::Newer {
            began: replaced.as_ref().and_then(|p| p.began),
            step_began: replaced.and_then(|p| p.step_began),
        };
        self.replan(rejected, why, events);
    }

    /// Plan from what the types serve now to the newest snapshot, holding back what refers
    /// to rejected resources. A step that went out and is not completed yet stays the step
    /// being waited on, unless what the new plan sends first is safe over it (it only adds
    /// or changes secrets, clusters and endpoints): the new plan never goes past what the
    /// client has not confirmed (a route to a cluster still warming, a removal of what a
    /// route in flight may still name).
    fn replan(&mut self, rejected: &Rejected, why: Replan, events: &mut VecDeque<Event>) {
        let Some(new) = self.newest.clone() else {
            return;
        };
        let Some(target) = self.target.clone() else {
            self.target = Some(new);
            return;
        };
        // Nothing sent yet: the client holds what it claimed, or (none) it is new, and gets
        // the newest at once as on a first snapshot.
        let holding = match (&self.confirmed, self.sent_any) {
            (_, true) => self.holding(&target),
            (Some(claimed), false) => Arc::clone(claimed),
            (None, false) => {
                self.target = Some(new);
                self.plan = None;
                return;
            }
        };
        // What the client holds of a type it claimed unknown content of, and was sent
        // nothing of yet: the newest, which it is to get at once.
        let holding = if self.unknown == 0 {
            holding
        } else {
            let unknown = self.unknown;
            Arc::new(Snapshot::from_types(ResourceType::ALL.map(|k| {
                let from = if unknown & (1 << k.index()) != 0 {
                    &new
                } else {
                    &holding
                };
                Arc::clone(from.get(k))
            })))
        };
        let pending = self.sent_any && self.pending();
        let base = scrub(&holding, &new, rejected);
        let (end, held_back) = effective(&new, &base, rejected);
        let (mut steps, end) = steps(&base, &end);
        let first = steps.first().unwrap_or(&end);
        // A step not yet completed is waited on first, unless what goes next is safe over it.
        let wait_first = pending && !first.same_as(&base) && !safe_over_pending(&base, first);
        // On a stream of a client back from an earlier one, what it holds that the server
        // does not know yet (withheld, settling) may name what the first step removes: the
        // removal waits, as between steps.
        let guard_removal = (self.withheld != 0 || self.settling) && removes(&base, first);
        if wait_first || guard_removal {
            steps.insert(0, Arc::clone(&base));
        }
        if steps.is_empty() && held_back == 0 {
            self.target = Some(end);
            return;
        }
        if steps.is_empty() && base.same_as(&end) {
            // Nothing to send: everything left is held back. Serve what it has.
            self.target = Some(base);
            return;
        }
        let (began, nacked, step_began) = match why {
            Replan::GoingOn { began, nacked } => (began, nacked, None),
            Replan::Newer { began, step_began } => {
                events.push_back(Event::Plan(PlanEvent::Started {
                    steps: steps.len() + 1,
                }));
                // A step carried over keeps its clock: a client that never answers holds
                // the plan up for one time-out, not one per newer snapshot. The plan goes
                // on from the one it replaces: it began when that one did (`/status`'s
                // "since", and `Completed`'s time from the first of overlapping edits).
                (began, None, if wait_first { step_began } else { None })
            }
        };
        self.target = Some(Arc::clone(steps.first().unwrap_or(&end)));
        self.plan = Some(Plan {
            steps,
            new: end,
            step: 0,
            began,
            step_began,
            held_back,
            nacked,
        });
    }

    /// Per-type streams: what the node's other streams still refer to.
    pub fn handle_peer_references(&mut self, references: Arc<BTreeSet<Reference>>) {
        if references == self.peer_references {
            return;
        }
        self.peer_references = references;
        self.retarget_unordered();
    }

    /// A per-type stream serves the newest snapshot, except that what it removes and the
    /// node's other streams still name stays (at the version served so far).
    fn retarget_unordered(&mut self) {
        let Some(new) = &self.newest else {
            return;
        };
        let target = match &self.target {
            Some(old) if self.ordering.enabled && !self.peer_references.is_empty() => {
                keep_referenced(old, new, &self.peer_references)
            }
            _ => Arc::clone(new),
        };
        self.target = Some(target);
    }

    /// The client NACKed `kind` (`rejected` now has what it rejected): what refers to the
    /// rejected resources is held back, and the rest of a plan in progress goes on from
    /// where the client is.
    pub fn handle_nack(
        &mut self,
        kind: ResourceType,
        rejected: &Rejected,
        events: &mut VecDeque<Event>,
    ) {
        if !self.ordered {
            return;
        }
        let began = match self.plan.take() {
            Some(plan) => {
                events.push_back(Event::Plan(PlanEvent::Stopped {
                    step: plan.step + 1,
                    kind,
                }));
                plan.began
            }
            None => None,
        };
        let why = Replan::GoingOn {
            began,
            nacked: Some(kind),
        };
        self.replan(rejected, why, events);
    }

    /// The client accepted resources it had rejected before: what was held back for them
    /// can go out now.
    pub fn handle_accepted(&mut self, rejected: &Rejected, events: &mut VecDeque<Event>) {
        if !self.ordered {
            return;
        }
        let why = match self.plan.take() {
            Some(p) => Replan::GoingOn {
                began: p.began,
                nacked: p.nacked,
            },
            None => Replan::GoingOn {
                began: None,
                nacked: None,
            },
        };
        self.replan(rejected, why, events);
    }

    /// When the current step times out, if a plan is waiting on the client.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let step = self.plan.as_ref().and_then(|p| p.step_began);
        let withheld = self.withheld_since.filter(|_| self.withheld != 0);
        [step, withheld]
            .into_iter()
            .flatten()
            .min()
            .map(|at| at + self.ordering.step_timeout)
    }

    /// Whether removals of what a client back from an earlier stream claims at versions the
    /// server does not keep wait: until it has the routes that no longer name them.
    pub fn defers_removal_of(&self, kind: ResourceType) -> bool {
        self.settling && removal_rank(kind) >= self.released
    }

    /// Whether nothing of `kind` goes out for now (see `withheld`).
    pub fn withholds(&self, kind: ResourceType) -> bool {
        self.withheld & (1 << kind.index()) != 0
    }

    /// Start the clocks of a plan or step just begun. Call before deciding what to send.
    pub fn start_clock(&mut self, now: Instant) {
        if let Some(plan) = &mut self.plan {
            plan.began.get_or_insert(now);
            plan.step_began.get_or_insert(now);
        }
        if self.withheld != 0 {
            self.withheld_since.get_or_insert(now);
        }
    }

    /// With nothing left to send on the current step: move to the next one if the client has
    /// completed this one (or its time is up). Returns whether the target changed. With no
    /// plan, notes when the client has completed what it was sent.
    pub fn advance(
        &mut self,
        now: Instant,
        client: &impl Progress,
        events: &mut VecDeque<Event>,
    ) -> bool {
        if !self.ordered {
            return false;
        }
        let moved = self.advance_plan(now, client, events);
        if self.withheld == 0 {
            if self.settling && !self.pending() && self.only_removals_left(client) {
                // One rank more of deferred removals goes; the plan's own removals wait for
                // the last (what they remove may be named by what is deferred).
                self.released += 1;
                if self.released > MAX_REMOVAL_RANK {
                    self.settling = false;
                    self.released = 0;
                }
                return true;
            }
            return moved;
        }
        let waited = now.saturating_duration_since(self.withheld_since.unwrap_or(now));
        // It asked for clusters and completed what CDS (and EDS) serve now; what is withheld
        // is not waited on (it waits for this).
        let completed = client.requested(Cluster)
            && self
                .target
                .as_ref()
                .is_none_or(|target| step_done(self.completed(), target, client));
        if completed || waited >= self.ordering.step_timeout {
            self.withheld = 0;
            self.withheld_since = None;
            return true;
        }
        moved
    }

    /// Whether the client has completed all but removals: nothing it was sent is
    /// unanswered, and the plan has ended or waits to remove.
    fn only_removals_left(&self, client: &impl Progress) -> bool {
        if ResourceType::ALL.iter().any(|&k| client.in_flight(k)) {
            return false;
        }
        self.plan.as_ref().is_none_or(|plan| {
            plan.step + 1 < plan.len()
                && removal_rank_of(plan.snapshot(plan.step), plan.snapshot(plan.step + 1))
                    .is_some_and(|rank| rank >= self.released)
        })
    }

    /// [`Planner::advance`] of the plan (or of a single response) alone.
    fn advance_plan(
        &mut self,
        now: Instant,
        client: &impl Progress,
        events: &mut VecDeque<Event>,
    ) -> bool {
        let Some(plan) = &mut self.plan else {
            if let Some(target) = self.target.as_ref().filter(|_| self.pending()) {
                if step_done(self.completed(), target, client)
                    && !withholds_part_of(self.withheld, self.confirmed.as_ref(), target)
                {
                    self.confirmed = Some(Arc::clone(target));
                }
            }
            return false;
        };
        let current = Arc::clone(plan.snapshot(plan.step));
        let next = (plan.step + 1 < plan.len()).then(|| plan.snapshot(plan.step + 1));
        let done = step_done(
            self.confirmed.as_ref().unwrap_or(nothing()),
            &current,
            client,
        ) && (!self.reconnected
            || next.is_none_or(|next| routes_may_change(&current, next, client)))
            && !withholds_part_of(self.withheld, self.confirmed.as_ref(), &current);
        // Withheld routes, or listeners and routes whose removal is deferred, may still name
        // what the next step removes: it waits for them (for those of the ranks before, while
        // deferred removals go rank by rank).
        let waits = |next: &Snapshot| {
            if self.withheld != 0 {
                removes(&current, next)
            } else {
                self.settling
                    && removal_rank_of(&current, next).is_some_and(|rank| rank >= self.released)
            }
        };
        if done && next.is_some_and(|next| waits(next)) {
            self.confirmed = Some(current);
            return false;
        }
        if !done {
            let began = plan.step_began.unwrap_or(now);
            let waited = now.saturating_duration_since(began);
            if waited < self.ordering.step_timeout {
                return false;
            }
            events.push_back(Event::Plan(PlanEvent::TimedOut {
                step: plan.step + 1,
                waited,
            }));
        }
        self.confirmed = Some(Arc::clone(&current));
        if plan.step + 1 == plan.len() {
            events.push_back(Event::Plan(PlanEvent::Completed {
                steps: plan.len(),
                took: now.saturating_duration_since(plan.began.unwrap_or(now)),
            }));
            self.plan = None;
            return false;
        }
        plan.step += 1;
        plan.step_began = Some(now);
        let next = Arc::clone(plan.snapshot(plan.step));
        events.push_back(Event::Plan(PlanEvent::Advanced {
            step: plan.step + 1,
            steps: plan.len(),
        }));
        self.target = Some(next);
        true
    }
}

/// Why a stream plans again.
enum Replan {
    /// A newer snapshot arrived; the plan it replaces (if any) began, and was waiting on its
    /// step, since then.
    Newer {
        began: Option<Instant>,
        step_began: Option<Instant>,
    },
    /// The same plan goes on after a NACK, or after the client accepted what it had
    /// rejected: its start and NACK are kept.
    GoingOn {
        began: Option<Instant>,
        nacked: Option<ResourceType>,
    },
}

/// Whether `next` may go out while `pending` (what was sent) is not yet completed: it only
/// adds or changes secrets, clusters, ClusterLoadAssignments and LEDS members, and removes
/// nothing. Those refer only to each other and go out together; what refers to them (a
/// route, a listener) stays as it is until a step the client has completed. Removing, or
/// changing a route or listener, waits: a route in flight may still name what is removed,
/// and a changed route may name a cluster the pending step is still warming.
fn safe_over_pending(pending: &Snapshot, next: &Snapshot) -> bool {
    ResourceType::ALL.iter().all(|&kind| {
        let (before, after) = (pending.get(kind), next.get(kind));
        if Arc::ptr_eq(before, after) || before.version == after.version {
            return true;
        }
        match kind {
            Secret | Cluster | Endpoint | LbEndpoint => after
                .changes_since(before)
                .iter()
                .all(|name| after.resources.contains_key(name)),
            _ => false,
        }
    })
}

/// Whether the client has ACKed step `current` (entered from `before`): no response of any
/// type is unanswered, and for every cluster the step added or changed that the client
/// holds, the client holds its ClusterLoadAssignment at the step's version if it asked for it
/// (P28: the cluster is warm, or warms on its own). Envoy asks for the endpoints of a new
/// cluster before it ACKs the cluster; a client that asks only later is not waited for.
fn step_done(before: &Snapshot, current: &Snapshot, client: &impl Progress) -> bool {
    if ResourceType::ALL.iter().any(|&k| client.in_flight(k)) {
        return false;
    }
    // Once per step and stream, not per cluster: a client that holds all it subscribes to
    // of the step's endpoints (and of its LEDS members) holds each changed cluster's, so
    // the step is done without a look at any name.
    let members = current.get(LbEndpoint);
    if client.holds_all(Endpoint, current.get(Endpoint))
        && (members.resources.is_empty() || client.holds_all(LbEndpoint, members))
    {
        debug_assert!(
            warmed_by_name(before, current, client),
            "holding the step's endpoints whole is holding each changed cluster's"
        );
        return true;
    }
    warmed_by_name(before, current, client)
}

/// [`step_done`]'s check, cluster by cluster: the client holds the ClusterLoadAssignment of
/// each cluster the step added or changed that it holds, if it subscribes to it.
fn warmed_by_name(before: &Snapshot, current: &Snapshot, client: &impl Progress) -> bool {
    let clusters = current.get(Cluster);
    let endpoints = current.get(Endpoint);
    // The changes with their resources (looked up once per pair of snapshots); a name gone
    // has none.
    clusters
        .changed_since(before.get(Cluster))
        .now
        .iter()
        .flatten()
        .filter(|c| client.holds_of(Cluster, clusters, c))
        .filter_map(|c| endpoints.resources.get(c.warms_with.as_deref()?))
        .all(|cla| {
            !client.subscribes(Endpoint, &cla.name)
                || (client.holds_of(Endpoint, endpoints, cla) && leds_arrived(cla, current, client))
        })
}

/// The order in which removals deferred on a reconnect go: what names a type goes before it
/// (a listener names route configurations, scoped routes and extension configs; a route
/// configuration clusters and virtual hosts; a cluster endpoints and secrets; endpoints
/// LEDS members).
fn removal_rank(kind: ResourceType) -> u8 {
    match kind {
        Listener | Runtime => 0,
        ScopedRoute | ExtensionConfig => 1,
        Route => 2,
        VirtualHost | Cluster => 3,
        Endpoint | Secret => 4,
        LbEndpoint => MAX_REMOVAL_RANK,
    }
}

const MAX_REMOVAL_RANK: u8 = 5;

/// The first [`removal_rank`] of what `next` removes from `current`, if it removes anything.
fn removal_rank_of(current: &Snapshot, next: &Snapshot) -> Option<u8> {
    ResourceType::ALL
        .iter()
        .filter(|&&kind| {
            let (now, then) = (current.get(kind), next.get(kind));
            then.changes_since(now)
                .iter()
                .any(|name| !then.resources.contains_key(name))
        })
        .map(|&kind| removal_rank(kind))
        .min()
}

/// Whether `step` has something of a type `withheld` (one bit each) that the client has not
/// completed (`confirmed`): the step is not done until it went.
fn withholds_part_of(withheld: u16, confirmed: Option<&Arc<Snapshot>>, step: &Snapshot) -> bool {
    let completed = confirmed.unwrap_or_else(|| nothing());
    withheld != 0
        && ResourceType::ALL.iter().any(|&kind| {
            withheld & (1 << kind.index()) != 0
                && step.get(kind).version != completed.get(kind).version
        })
}

/// Whether `next` removes something `current` has.
fn removes(current: &Snapshot, next: &Snapshot) -> bool {
    removal_rank_of(current, next).is_some()
}

/// On a stream of a client back from an earlier one: whether `next` may change what names
/// clusters (listeners, routes) from `current`. Not while the client, asking for those, has
/// not asked for clusters on this stream: Envoy back on a new stream holds its CDS request
/// while clusters it has warm (it pauses CDS), so its route requests come first, and until
/// its CDS request says what it holds a route could name a cluster still warming there.
fn routes_may_change(current: &Snapshot, next: &Snapshot, client: &impl Progress) -> bool {
    if client.requested(Cluster) {
        return true;
    }
    [Listener, Route, ScopedRoute, VirtualHost]
        .iter()
        .all(|&kind| !client.requested(kind) || current.get(kind).version == next.get(kind).version)
}

/// P34: a ClusterLoadAssignment whose localities take their endpoints by LEDS warms its
/// cluster once the members of those collections have arrived: every member the client
/// subscribes to, held at the step's version.
fn leds_arrived(cla: &Resource, current: &Snapshot, client: &impl Progress) -> bool {
    let members = current.get(LbEndpoint);
    cla.references
        .iter()
        .filter(|(kind, _)| *kind == LbEndpoint)
        .flat_map(|(_, glob)| members.members(glob))
        .all(|m| {
            !client.subscribes(LbEndpoint, &m.name) || client.holds(LbEndpoint, &m.name, &m.version)
        })
}

#[cfg(test)]
mod tests;
