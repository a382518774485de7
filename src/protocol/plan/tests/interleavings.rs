//! Make-before-break when changes overlap (P28-P30): newer snapshots, NACKs and time-outs
//! arriving while a step waits for the client, each interleaving as a scenario, then as a
//! property over random schedules against a simulated Envoy whose answers come late.
//!
//! The simulated Envoy here is the one of the parent module, driven step by step: each
//! response is applied when it arrives, but its answer comes at a time the schedule picks,
//! and a CDS answer only once no cluster it holds is warming (Envoy pauses its CDS requests
//! while clusters warm: their ClusterLoadAssignment has not arrived, or their first health
//! check has not passed). The property (P29): at no moment does a listener it holds route
//! to a cluster it lacks or that is still warming.

use std::collections::{BTreeSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{
    base, brings_bad, random_mesh, removes, sends, silent_on_cds, Answer, Client, Delta, Envoy,
    Got, Mesh, Proxy, Sotw,
};
use crate::cache::Snapshot;
use crate::protocol::plan::{PlanEvent, DEFAULT_STEP_TIMEOUT};
use crate::protocol::{Event, Ordering};
use crate::resource::{Resource, ResourceType};

use ResourceType::{Cluster, Endpoint, Listener, Route};

/// The route configurations of `envoy`'s `route`: the clusters it names.
fn route_to<C: Client>(envoy: &Envoy<C>, route: &str) -> Vec<String> {
    envoy.proxy.have[&Route][route]
        .refers_to(Cluster)
        .map(str::to_string)
        .collect()
}

/// The latest CDS response the simulated Envoy got.
fn last_cds<C: Client>(envoy: &Envoy<C>) -> Got {
    envoy
        .log
        .iter()
        .rev()
        .find(|g| g.kind == Cluster)
        .cloned()
        .expect("a CDS response")
}

/// Cluster `y` added with the route moved to it (a plan of two steps).
fn to_y() -> Mesh {
    Mesh {
        clusters: vec![("x", "1"), ("y", "1")],
        routes: vec![("r", "y")],
        ..base()
    }
}

/// The scenario of the field report: a cluster is added with a route to it, the client sits
/// on its CDS ACK while the cluster warms, and a route-only edit arrives meanwhile. Nothing
/// routes to the new cluster before the client ACKs it (the step is pending, not done).
fn newer_snapshot_while_step_1_awaits_its_ack_keeps_waiting<C: Client>() {
    let mut envoy = Envoy::<C>::start(Ordering::default(), base().snapshot());
    envoy.answer = silent_on_cds;
    envoy.client.snapshot(to_y().snapshot());
    envoy.run(Instant::now());
    let cds = last_cds(&envoy);
    assert!(
        envoy.first(sends(Route, "r")).is_none(),
        "{:?}",
        envoy.trace()
    );
    // A route-only edit: r2 added, also to y (and r still to y).
    let edit = Mesh {
        routes: vec![("r", "y"), ("r2", "y")],
        listeners: vec![("l", "r"), ("l2", "r2")],
        ..to_y()
    };
    envoy.client.snapshot(edit.snapshot());
    envoy.run(Instant::now());
    assert!(
        envoy
            .first(|g| g.kind == Route || g.kind == Listener)
            .is_none(),
        "a route or listener went out before the CDS ACK: {:?}",
        envoy.trace()
    );
    // The ACK: then the newest routes go (with the listener), in one more step.
    envoy.answer = super::ack_all;
    envoy.ack(&cds);
    envoy.run(Instant::now());
    assert_eq!(route_to(&envoy, "r"), ["y"], "{:?}", envoy.trace());
    assert_eq!(route_to(&envoy, "r2"), ["y"], "{:?}", envoy.trace());
    assert_eq!(envoy.holds(Listener), ["l", "l2"]);
    assert_eq!(envoy.client.plan(), None, "the plan completed");
    let events = envoy.client.events();
    assert!(
        events.contains(&Event::Plan(PlanEvent::Replaced { step: 1 })),
        "{events:?}"
    );
}

/// Two edits that each cross no dependency alone: a cluster added (no plan), and before its
/// CDS ACK a route to it. The route waits for the ACK.
fn a_route_to_a_cluster_sent_alone_waits_for_its_ack<C: Client>() {
    let mut envoy = Envoy::<C>::start(Ordering::default(), base().snapshot());
    envoy.answer = silent_on_cds;
    let add_y = Mesh {
        clusters: vec![("x", "1"), ("y", "1")],
        ..base()
    };
    envoy.client.snapshot(add_y.snapshot());
    envoy.run(Instant::now());
    assert!(envoy.client.plan().is_none(), "a cluster alone is no plan");
    let cds = last_cds(&envoy);
    envoy.client.snapshot(to_y().snapshot());
    envoy.run(Instant::now());
    assert!(
        envoy.first(sends(Route, "r")).is_none(),
        "{:?}",
        envoy.trace()
    );
    assert_eq!(
        envoy.client.plan().map(|p| (p.step, p.steps)),
        Some((1, 2)),
        "waiting on what was sent, then the route"
    );
    envoy.answer = super::ack_all;
    envoy.ack(&cds);
    envoy.run(Instant::now());
    assert_eq!(route_to(&envoy, "r"), ["y"], "{:?}", envoy.trace());
    assert_eq!(envoy.client.plan(), None);
}

/// Two newer snapshots in a row while step 1 waits: a third cluster, then a route edit. The
/// cluster goes as soon as CDS may carry it (one response of a type in flight), the route
/// only after the client ACKed every cluster sent; the plan ends at the newest snapshot.
fn two_newer_snapshots_in_a_row<C: Client>() {
    let mut envoy = Envoy::<C>::start(Ordering::default(), base().snapshot());
    envoy.answer = silent_on_cds;
    envoy.client.snapshot(to_y().snapshot());
    envoy.run(Instant::now());
    let add_z = Mesh {
        clusters: vec![("x", "1"), ("y", "1"), ("z", "1")],
        ..to_y()
    };
    envoy.client.snapshot(add_z.snapshot());
    envoy.run(Instant::now());
    let cds = last_cds(&envoy);
    let to_z = Mesh {
        routes: vec![("r", "z")],
        ..add_z
    };
    envoy.client.snapshot(to_z.snapshot());
    envoy.run(Instant::now());
    assert!(
        envoy.first(sends(Route, "r")).is_none(),
        "{:?}",
        envoy.trace()
    );
    envoy.answer = super::ack_all;
    envoy.ack(&cds);
    envoy.run(Instant::now());
    let t = envoy.trace();
    let add_z = envoy.first(sends(Cluster, "z")).expect("CDS with z");
    let eds_z = envoy.first(sends(Endpoint, "z")).expect("EDS of z");
    let rds = envoy.first(sends(Route, "r")).expect("RDS r");
    assert!(add_z < rds && eds_z < rds, "{t:?}");
    assert_eq!(route_to(&envoy, "r"), ["z"], "{t:?}");
    assert!(
        !envoy.log.iter().any(|g| g.kind == Route
            && g.resources
                .iter()
                .any(|r| r.refers_to(Cluster).any(|c| c == "y"))),
        "the stale route to y never went: {:?}",
        envoy.trace()
    );
    assert_eq!(envoy.holds(Cluster), ["x", "y", "z"]);
    assert_eq!(envoy.client.plan(), None);
}

/// A NACK of the pending step, then a newer snapshot that fixes the rejected cluster: what
/// refers to it was held back, and goes once the fix is ACKed.
fn nack_mid_plan_then_a_newer_snapshot<C: Client>() {
    let mut envoy = Envoy::<C>::start(Ordering::default(), base().snapshot());
    envoy.answer = super::nack_bad_y;
    let bad_y = Mesh {
        clusters: vec![("x", "1"), ("y", "bad")],
        routes: vec![("r", "y")],
        ..base()
    };
    envoy.client.snapshot(bad_y.snapshot());
    envoy.run(Instant::now());
    assert_eq!(route_to(&envoy, "r"), ["x"], "{:?}", envoy.trace());
    envoy.answer = silent_on_cds;
    envoy.client.snapshot(to_y().snapshot());
    envoy.run(Instant::now());
    let cds = last_cds(&envoy);
    assert!(
        cds.names().contains(&"y"),
        "the fix goes: {:?}",
        envoy.trace()
    );
    assert_eq!(route_to(&envoy, "r"), ["x"], "not before the fix is ACKed");
    envoy.answer = super::ack_all;
    envoy.ack(&cds);
    envoy.run(Instant::now());
    assert_eq!(route_to(&envoy, "r"), ["y"], "{:?}", envoy.trace());
    assert_eq!(envoy.client.plan(), None);
}

/// A cut-over x -> y whose route is in flight (step 2 sent, not ACKed) when a newer
/// snapshot arrives that removes x at once: x goes only after the route's ACK.
fn removal_whose_referrer_is_still_in_flight<C: Client>() {
    let mut envoy = Envoy::<C>::start(Ordering::default(), base().snapshot());
    let cut_over = Mesh {
        clusters: vec![("y", "1")],
        routes: vec![("r", "y")],
        ..base()
    };
    // ACK everything but RDS, which the client sits on.
    envoy.answer = |g| {
        if g.kind == Route {
            Answer::Silence
        } else {
            Answer::Ack
        }
    };
    envoy.client.snapshot(cut_over.snapshot());
    envoy.run(Instant::now());
    let rds = envoy.log.iter().rev().find(|g| g.kind == Route).cloned();
    let rds = rds.expect("the route went");
    assert!(envoy.first(removes("x")).is_none(), "{:?}", envoy.trace());
    // A newer snapshot: y's endpoints change and nothing names x.
    let newer = Mesh {
        clusters: vec![("y", "2")],
        ..cut_over
    };
    envoy.client.snapshot(newer.snapshot());
    envoy.run(Instant::now());
    assert!(
        envoy.first(removes("x")).is_none(),
        "x removed while the route that moves off it is unanswered: {:?}",
        envoy.trace()
    );
    envoy.answer = super::ack_all;
    envoy.ack(&rds);
    envoy.run(Instant::now());
    assert!(envoy.first(removes("x")).is_some(), "{:?}", envoy.trace());
    assert_eq!(envoy.holds(Cluster), ["y"]);
    assert_eq!(envoy.client.plan(), None);
}

/// A newer snapshot while step 1 waits on a silent client keeps the step's clock: the wait
/// ends one time-out after the step went out, not one after each newer snapshot.
fn time_out_mid_plan_keeps_the_step_s_clock<C: Client>() {
    let mut envoy = Envoy::<C>::start(Ordering::default(), base().snapshot());
    envoy.answer = silent_on_cds;
    let t0 = Instant::now();
    envoy.client.snapshot(to_y().snapshot());
    envoy.run(t0);
    let later = t0 + Duration::from_secs(2);
    let edit = Mesh {
        routes: vec![("r", "y"), ("r2", "y")],
        listeners: vec![("l", "r"), ("l2", "r2")],
        ..to_y()
    };
    envoy.client.snapshot(edit.snapshot());
    envoy.run(later);
    assert_eq!(envoy.client.timeout(), Some(t0 + DEFAULT_STEP_TIMEOUT));
    // Past it, the next step goes although the client never answered (the documented limit
    // of a silent client: the simulated Envoy sees y still warming).
    assert!(envoy.try_run(t0 + DEFAULT_STEP_TIMEOUT).is_err());
    assert!(
        envoy.first(sends(Route, "r2")).is_some(),
        "{:?}",
        envoy.trace()
    );
    let events = envoy.client.events();
    assert!(
        events
            .iter()
            .any(|e| matches!(e, Event::Plan(PlanEvent::TimedOut { step: 1, .. }))),
        "{events:?}"
    );
}

sotw_and_delta!(
    newer_snapshot_while_step_1_awaits_its_ack_keeps_waiting,
    a_route_to_a_cluster_sent_alone_waits_for_its_ack,
    two_newer_snapshots_in_a_row,
    nack_mid_plan_then_a_newer_snapshot,
    removal_whose_referrer_is_still_in_flight,
    time_out_mid_plan_keeps_the_step_s_clock,
    p29_p30_random_schedules_never_route_to_a_cluster_not_warm,
    p29_p30_random_schedules_with_reconnects_never_route_to_a_cluster_not_warm,
);

// === the property over random schedules ===

/// A simulated Envoy whose answers come when the schedule says.
struct Late<C> {
    client: C,
    proxy: Proxy,
    /// Responses taken and not answered yet, oldest first, each with its answer.
    unanswered: VecDeque<(Got, Answer)>,
    /// What happened, for the failure message.
    trace: Vec<String>,
    ordering: Ordering,
    /// The snapshots given so far, newest first (at most three): what a replica keeps.
    recent: Vec<Arc<Snapshot>>,
    /// Back on a new stream, its CDS request not sent yet (Envoy holds it while a cluster
    /// warms).
    cds_to_claim: bool,
    /// Since a CDS claim the server did not recognise, until the update it then makes is
    /// complete: the newest goes at once, the documented limit, so P29 is not judged.
    unordered: bool,
    /// Reconnects whose CDS claim was made, and those of them the server did not recognise.
    claims: usize,
    unrecognised: usize,
    /// Reconnects, and those holding no listener.
    reconnects: usize,
    bare: usize,
    /// Whether it took a response since it came back (until then a proxy that holds nothing
    /// is new to the server).
    answered_since: bool,
}

impl<C: Client> Late<C> {
    fn start(ordering: Ordering, first: &Mesh) -> Late<C> {
        let snapshot = first.snapshot();
        let envoy = Envoy::<C>::start(ordering, Arc::clone(&snapshot));
        Late {
            client: envoy.client,
            proxy: envoy.proxy,
            unanswered: VecDeque::new(),
            trace: Vec::new(),
            ordering,
            recent: vec![snapshot],
            cds_to_claim: false,
            unordered: false,
            claims: 0,
            unrecognised: 0,
            reconnects: 0,
            bare: 0,
            answered_since: true,
        }
    }

    /// A newer snapshot.
    fn snapshot(&mut self, snapshot: Arc<Snapshot>) {
        self.recent.insert(0, Arc::clone(&snapshot));
        self.recent.truncate(3);
        self.client.snapshot(snapshot);
    }

    /// Its stream ends (its replica died) and it comes back, to a replica that keeps the
    /// recent snapshots, saying what it holds: listeners, endpoints and routes first, CDS
    /// once no cluster warms. Its unanswered responses are gone with the stream.
    fn reconnect(&mut self) {
        self.trace.push("reconnect".into());
        // What it applied it has accepted, ACKed or not (Envoy's version of a type is set
        // when a response is applied; the ACK may wait, CDS's while clusters warm).
        for (got, answer) in std::mem::take(&mut self.unanswered) {
            if answer == Answer::Ack {
                self.client.ack(&got);
            }
        }
        if self
            .proxy
            .have
            .get(&Listener)
            .is_none_or(|held| held.is_empty())
        {
            // Holding no listener, it has no route a request could take: to the server, until
            // its CDS request (which waits while a cluster warms), a new proxy, given the
            // newest at once (a new Envoy asks for listeners only once its clusters are
            // warm). Not judged until that is complete.
            self.trace.push("back holding no listener".into());
            self.unordered = true;
            self.bare += 1;
        }
        self.reconnects += 1;
        self.answered_since = false;
        let mut back = self.client.reopen(self.ordering);
        for kind in [Listener, Endpoint, Route] {
            back.claim(kind, &self.proxy);
        }
        self.client = back;
        self.unanswered.clear();
        self.client.snapshot(Arc::clone(&self.recent[0]));
        self.client.stream_mut().handle_history(&self.recent);
        self.cds_to_claim = true;
        self.claim_cds();
    }

    /// Its CDS request after a reconnect, once no cluster it holds warms.
    fn claim_cds(&mut self) {
        if !self.cds_to_claim || self.cds_paused() {
            return;
        }
        self.cds_to_claim = false;
        self.client.claim(Cluster, &self.proxy);
        self.client.stream_mut().handle_history(&self.recent);
        let events = self.client.events();
        let unrecognised = events.contains(&Event::Plan(PlanEvent::Reconnected {
            kind: Cluster,
            ordered: false,
        }));
        self.claims += 1;
        self.unrecognised += usize::from(unrecognised);
        self.unordered |= unrecognised;
        self.trace.push(format!("CDS claimed: {:?}", short(events)));
    }

    /// Whether it holds what the stream serves of `kind` now.
    fn holds_target(&self, kind: ResourceType) -> bool {
        let mut holds: Vec<String> = self
            .proxy
            .have
            .get(&kind)
            .into_iter()
            .flat_map(|m| m.values())
            .map(|r| body_of(r))
            .collect();
        holds.sort();
        let mut target = self.client.stream().target_bodies(kind);
        target.sort();
        holds == target
    }

    /// An unordered update is over once nothing is pending and the proxy holds what routes
    /// nowhere it should not: from there on it is judged again.
    fn judge_again(&mut self) {
        if self.unordered
            && self.answered_since
            && !self.cds_to_claim
            && self.client.plan().is_none()
            && self.unanswered.is_empty()
            && [Cluster, Listener]
                .iter()
                .all(|&kind| self.holds_target(kind))
            && self.proxy.violations().is_empty()
        {
            self.trace.push("ordered again".into());
            self.unordered = false;
        }
    }

    /// Take the next response, if any: apply it and subscribe to what it names.
    fn receive(&mut self, now: Instant) -> Result<bool, String> {
        let Some(got) = self.client.next(now) else {
            return Ok(false);
        };
        let answer = if brings_bad(&got) {
            Answer::Nack
        } else {
            Answer::Ack
        };
        let removed = got.removed.clone();
        let bodies: Vec<String> = got.resources.iter().map(|r| body_of(r)).collect();
        self.trace.push(format!(
            "got {}{:?} -{removed:?} rej={:?}",
            got.kind,
            bodies,
            self.client
                .rejected()
                .iter()
                .map(|r| r.1.clone())
                .collect::<Vec<_>>()
        ));
        self.proxy.take(&got, answer);
        self.answered_since = true;
        self.unanswered.push_back((got, answer));
        self.check("a response")?;
        // A name change of a type goes out with its pending answers (Envoy's requests carry
        // the latest nonce it took of the type).
        for kind in [ResourceType::Secret, Endpoint, Route] {
            if self.proxy.wants(kind) != self.subscribed(kind) {
                self.answer_all(kind);
            }
        }
        self.proxy.subscribe(&mut self.client);
        Ok(true)
    }

    /// What it holds of `kind`, which its subscription follows.
    fn subscribed(&self, kind: ResourceType) -> BTreeSet<String> {
        self.proxy
            .have
            .get(&kind)
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default()
    }

    /// Whether a cluster it holds is warming: Envoy pauses its CDS requests meanwhile.
    fn cds_paused(&self) -> bool {
        !self.proxy.warming.is_empty() || !self.proxy.checking.is_empty()
    }

    /// Answer the oldest unanswered response of `kind`, if it may be answered now.
    fn answer_one(&mut self, kind: ResourceType) -> bool {
        if kind == Cluster && self.cds_paused() {
            return false;
        }
        let Some(at) = self.unanswered.iter().position(|(g, _)| g.kind == kind) else {
            return false;
        };
        let Some((got, answer)) = self.unanswered.remove(at) else {
            return false;
        };
        self.trace.push(format!(
            "answer {} {}",
            got.kind,
            if answer == Answer::Nack {
                "NACK"
            } else {
                "ACK"
            }
        ));
        match answer {
            Answer::Nack => self.client.nack(&got, "rejected"),
            _ => self.client.ack(&got),
        }
        true
    }

    fn answer_all(&mut self, kind: ResourceType) {
        while self.answer_one(kind) {}
    }

    /// A cluster whose endpoints arrived passes its first health check.
    fn health_check(&mut self, pick: u64) -> bool {
        let ready: Vec<String> = self
            .proxy
            .checking
            .iter()
            .filter(|c| !self.proxy.warming.contains(*c))
            .cloned()
            .collect();
        let Some(name) = ready.get(pick as usize % ready.len().max(1)) else {
            return false;
        };
        self.trace.push(format!("{name} healthy"));
        self.proxy.checking.remove(name);
        true
    }

    /// Nothing else moves, and a cluster back on a new stream still waits for endpoints no
    /// replica has any more (the newest snapshot lacks them): Envoy's initial fetch timeout
    /// ends its warming with no endpoints (a route to it then fails), and its CDS request,
    /// held meanwhile, goes.
    fn fetch_timeout(&mut self) -> bool {
        let stuck = std::mem::take(&mut self.proxy.warming);
        if stuck.is_empty() {
            return false;
        }
        self.trace.push(format!("fetch timeout {stuck:?}"));
        self.proxy.empty.extend(stuck);
        true
    }

    fn check(&self, after: &str) -> Result<(), String> {
        let bad = self.proxy.violations();
        if bad.is_empty() || self.unordered {
            return Ok(());
        }
        Err(format!(
            "P29 violated after {after}: {bad:?}; {:?}",
            self.trace
        ))
    }

    /// Run until nothing is left to take, answer or check.
    fn settle(&mut self, now: Instant) -> Result<(), String> {
        for _ in 0..1000 {
            self.claim_cds();
            self.judge_again();
            let mut moved = self.receive(now)?;
            for kind in ResourceType::ALL {
                moved |= self.answer_one(kind);
            }
            moved |= self.health_check(0);
            if !moved && self.cds_to_claim && self.cds_paused() {
                moved = self.fetch_timeout();
            }
            if !moved {
                return Ok(());
            }
        }
        Err(format!("never settled: {:?}", self.trace))
    }
}

/// One random schedule: snapshots (some with a cluster the client rejects) arriving at any
/// moment, responses taken, answered and health checks passing in random order; every choice
/// from `rand`. Returns whether a snapshot arrived while a plan or a response was pending
/// (the case this is about), or what went wrong: P29 broken, or no convergence.
fn late_run<C: Client>(
    ordering: Ordering,
    rand: &mut dyn FnMut(u64) -> u64,
) -> Result<bool, String> {
    late_run_with::<C>(ordering, false, rand).map(|(overlapped, _)| overlapped)
}

/// [`late_run`], and with `reconnects` the proxy's stream also ends at random moments and it
/// comes back (to a replica keeping the last three snapshots) saying what it holds. Returns
/// also what came of the reconnects.
fn late_run_with<C: Client>(
    ordering: Ordering,
    reconnects: bool,
    rand: &mut dyn FnMut(u64) -> u64,
) -> Result<(bool, Reconnects), String> {
    let mut rand = rand;
    let first = random_mesh(&mut rand, false);
    let mut envoy = Late::<C>::start(ordering, &first);
    let now = Instant::now();
    let mut overlapped = false;
    for _ in 0..60 {
        envoy.claim_cds();
        envoy.judge_again();
        match rand(if reconnects { 11 } else { 10 }) {
            10 => envoy.reconnect(),
            0 => {
                let ev = short(envoy.client.events());
                envoy.trace.push(format!("{ev:?}"));
                overlapped |= envoy.client.plan().is_some() || !envoy.unanswered.is_empty();
                let mesh = random_mesh(&mut rand, !reconnects);
                envoy.trace.push(format!("snapshot {:?}", mesh.clusters));
                envoy.snapshot(mesh.snapshot());
                let st = envoy.client.stream();
                envoy.trace.push(format!(
                    "target CDS {:?} EDS {:?}",
                    st.target_bodies(Cluster),
                    st.target_bodies(Endpoint)
                ));
            }
            1..=4 => {
                envoy.receive(now)?;
            }
            5..=7 => {
                let kind = ResourceType::ALL[rand(ResourceType::ALL.len() as u64) as usize];
                envoy.answer_one(kind);
            }
            _ => {
                let pick = rand(4);
                envoy.health_check(pick);
                envoy.check("a health check")?;
            }
        }
    }
    let last = random_mesh(&mut rand, false);
    envoy.trace.push(format!(
        "last snapshot {:?} {:?} {:?}",
        last.clusters, last.routes, last.listeners
    ));
    envoy.snapshot(last.snapshot());
    envoy.settle(now)?;
    envoy.trace.push(format!(
        "settled {:?} {:?}",
        envoy.client.plan(),
        short(envoy.client.events())
    ));
    if envoy.client.plan().is_some() {
        return Err(format!("the plan never ended: {:?}", envoy.trace));
    }
    let expect = last.snapshot();
    for kind in [Cluster, Listener, Route] {
        let mut want: Vec<String> = expect.get(kind).resources.keys().cloned().collect();
        if kind == Route {
            let named: BTreeSet<&str> = last.listeners.iter().map(|(_, r)| *r).collect();
            want.retain(|r| named.contains(r.as_str()));
        }
        let holds: Vec<String> = envoy.subscribed(kind).into_iter().collect();
        if holds != want {
            return Err(format!(
                "{kind} did not converge: holds {holds:?}, wants {want:?}; {:?}",
                envoy.trace
            ));
        }
    }
    Ok((
        overlapped,
        Reconnects {
            all: envoy.reconnects,
            bare: envoy.bare,
            claims: envoy.claims,
            unrecognised: envoy.unrecognised,
        },
    ))
}

/// P29/P30 as a property: over random schedules of snapshots, answers and health checks,
/// the simulated Envoy never routes to a cluster it lacks or that is warming, and ends
/// holding the last snapshot. Most schedules overlap (a snapshot arrives while something
/// sent is unanswered). Without ordering the same schedules break P29 (the check can fail).
///
/// 300 schedules per flavor in the suite; `SWITCHYARD_MODEL_CASES=N` runs N (the larger run
/// in docs/benchmarks.md).
fn p29_p30_random_schedules_never_route_to_a_cluster_not_warm<C: Client>() {
    let cases = std::env::var("SWITCHYARD_MODEL_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(300);
    let overlapped = std::cell::Cell::new(0);
    crate::testing::on_tapes(cases, |rand| {
        match late_run::<C>(Ordering::default(), rand) {
            Ok(o) => overlapped.set(overlapped.get() + usize::from(o)),
            Err(e) => panic!("{e}"),
        }
    });
    assert!(
        overlapped.get() > cases as usize / 2,
        "too few overlapping schedules: {} of {cases}",
        overlapped.get()
    );
    let broken = std::cell::Cell::new(0);
    crate::testing::on_tapes(100, |rand| {
        if late_run::<C>(Ordering::off(), rand).is_err_and(|e| e.starts_with("P29")) {
            broken.set(broken.get() + 1);
        }
    });
    assert!(
        broken.get() > 10,
        "without ordering, only {} broke",
        broken.get()
    );
}

/// What came of the reconnects of a schedule: how many, how many held no listener, how many
/// came back with a CDS request, and how many of those the server did not recognise.
#[derive(Default, Clone, Copy, Debug)]
struct Reconnects {
    all: usize,
    bare: usize,
    claims: usize,
    unrecognised: usize,
}

/// The same property with reconnects: at random moments the proxy's
/// stream ends and it comes back, as Envoy does (its CDS request only once nothing warms), to
/// a replica that keeps the last three snapshots. Where the server recognises the clusters it
/// comes back with (those snapshots and the steps between them), nothing routes to a cluster
/// it lacks or that warms. It is not judged, until the update it then gets is complete, where
/// the server cannot know: a CDS claim it does not recognise (it sends the newest at once,
/// the documented limit, and says so with `Reconnected { ordered: false }`), or a proxy back
/// holding no listener (no route of it was in use; a new proxy to the server until its CDS
/// request). Both are counted and printed; most reconnects must be judged. Without ordering
/// the same schedules break P29.
///
/// `SWITCHYARD_MODEL_CASES=N` runs N schedules (docs/benchmarks.md).
fn p29_p30_random_schedules_with_reconnects_never_route_to_a_cluster_not_warm<C: Client>() {
    let cases = std::env::var("SWITCHYARD_MODEL_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(300);
    let total = std::cell::Cell::new(Reconnects::default());
    crate::testing::on_tapes(cases, |rand| {
        match late_run_with::<C>(Ordering::default(), true, rand) {
            Ok((_, r)) => {
                let t = total.get();
                total.set(Reconnects {
                    all: t.all + r.all,
                    bare: t.bare + r.bare,
                    claims: t.claims + r.claims,
                    unrecognised: t.unrecognised + r.unrecognised,
                });
            }
            Err(e) => panic!("{e}"),
        }
    });
    let t = total.get();
    println!(
        "{cases} schedules: {} reconnects, {} holding no listener; {} CDS requests, {} of them \
         unrecognised",
        t.all, t.bare, t.claims, t.unrecognised
    );
    assert!(
        t.all > cases as usize,
        "too few reconnects to mean much: {t:?}"
    );
    assert!(
        (t.bare + t.unrecognised) * 2 < t.all,
        "most reconnects must be judged: {t:?}"
    );
    let broken = std::cell::Cell::new(0);
    crate::testing::on_tapes(100, |rand| {
        if late_run_with::<C>(Ordering::off(), true, rand).is_err_and(|e| e.starts_with("P29")) {
            broken.set(broken.get() + 1);
        }
    });
    assert!(
        broken.get() > 10,
        "without ordering, only {} broke",
        broken.get()
    );
}

/// A resource's body (`name:content`, and what it names).
fn body_of(r: &Resource) -> String {
    String::from_utf8_lossy(&r.body).into_owned()
}

/// Events in brief, for the failure message.
fn short(events: Vec<Event>) -> Vec<String> {
    events
        .iter()
        .map(|e| match e {
            Event::Plan(p) => format!("{p:?}"),
            Event::Nacked { kind, .. } => format!("NACK {kind}"),
            Event::Acked { kind, .. } => format!("ACK {kind}"),
            Event::Stale { kind, .. } => format!("stale {kind}"),
            _ => "other".into(),
        })
        .collect()
}

// === reconnects ===

/// A proxy whose replica died mid-change reconnects, to a replica serving the same files,
/// holding the older generation: the newer one reaches it make-before-break from what it
/// holds (the route waits for the new cluster; the old cluster stays until the route moved),
/// as on a live stream. P13 (SotW's versions), P23 (delta's), P29, P30.
fn reconnect_holding_an_older_generation_is_brought_in_order<C: Client>() {
    let (old, new) = (base().snapshot(), cut_over().snapshot());
    let mut envoy = Envoy::<C>::start(Ordering::default(), Arc::clone(&old));
    envoy.client = envoy.client.reconnect(Ordering::default(), &envoy.proxy);
    envoy.answer = silent_on_cds;
    envoy.client.snapshot(Arc::clone(&new));
    envoy.client.stream_mut().handle_history(&[new, old]);
    envoy.run(Instant::now());
    assert!(
        envoy.first(sends(Route, "r")).is_none(),
        "{:?}",
        envoy.trace()
    );
    assert!(envoy.first(removes("x")).is_none(), "{:?}", envoy.trace());
    let cds = last_cds(&envoy);
    // Step 1: y added, x kept (SotW: both in the CDS; delta: y alone, nothing removed).
    let want: &[&str] = if cds.full_state { &["x", "y"] } else { &["y"] };
    assert_eq!(cds.names(), want, "{:?}", envoy.trace());
    envoy.answer = super::ack_all;
    envoy.ack(&cds);
    envoy.run(Instant::now());
    let t = envoy.trace();
    let rds = envoy.first(sends(Route, "r")).expect("the route moves");
    let remove_x = envoy.first(removes("x")).expect("x removed");
    assert!(rds < remove_x, "{t:?}");
    assert_eq!(route_to(&envoy, "r"), ["y"]);
    assert_eq!(envoy.client.plan(), None);
    let events = envoy.client.events();
    for kind in [Cluster, Listener] {
        assert!(
            events.contains(&Event::Plan(PlanEvent::Reconnected {
                kind,
                ordered: true
            })),
            "{kind}: {events:?}"
        );
    }
}

/// The same, but the proxy holds content the server does not keep (its generations are
/// not among the known ones), and the event says so. Over SotW (one version for the whole
/// CDS) it gets the newest at once, unordered: the simulated Envoy catches `x` removed under
/// its route (the check can fail). Over delta the names it claims stay until the route that
/// names them has moved, so even that is in order.
fn reconnect_holding_unknown_content_falls_back_and_says_so<C: Client>() {
    let (old, new) = (base().snapshot(), cut_over().snapshot());
    let mut envoy = Envoy::<C>::start(Ordering::default(), old);
    envoy.client = envoy.client.reconnect(Ordering::default(), &envoy.proxy);
    envoy.answer = silent_on_cds;
    envoy.client.snapshot(Arc::clone(&new));
    envoy.client.stream_mut().handle_history(&[new]);
    let run = envoy.try_run(Instant::now());
    let delta = envoy.log.first().is_some_and(|g| !g.full_state);
    assert_eq!(run.is_err(), !delta, "{run:?}; {:?}", envoy.trace());
    assert!(came_back(&mut envoy, Cluster, false));
}

/// A proxy that held a plan's first step (clusters old and new) when its replica died: that
/// step is no generation, but every replica computes the same steps between the same two,
/// so it is recognised, and the route still waits for the CDS ACK.
fn reconnect_holding_a_plan_step_is_recognised<C: Client>() {
    let (old, new) = (base().snapshot(), cut_over().snapshot());
    let mut envoy = Envoy::<C>::start(Ordering::default(), Arc::clone(&old));
    envoy.answer = silent_on_cds;
    envoy.client.snapshot(Arc::clone(&new));
    envoy.run(Instant::now());
    let cds = last_cds(&envoy);
    // It takes the step-1 CDS and EDS, ACKs them, and its replica dies before step 2.
    envoy.ack(&cds);
    envoy.client = envoy.client.reconnect(Ordering::default(), &envoy.proxy);
    envoy.log.clear();
    envoy.answer = super::ack_all;
    envoy.client.snapshot(Arc::clone(&new));
    envoy.client.stream_mut().handle_history(&[new, old]);
    envoy.run(Instant::now());
    let t = envoy.trace();
    let rds = envoy.first(sends(Route, "r")).expect("the route moves");
    let remove_x = envoy.first(removes("x")).expect("x removed");
    assert!(rds < remove_x, "{t:?}");
    assert!(came_back(&mut envoy, Cluster, true));
}

/// Envoy back on a new stream holds its CDS request while a cluster it has warms (it pauses
/// CDS): its listener and route requests come first. Nothing that names clusters moves
/// until its CDS request says what it holds; then the cut-over goes in order.
fn reconnect_whose_cds_request_comes_last_moves_no_route_before_it<C: Client>() {
    let (old, new) = (base().snapshot(), cut_over().snapshot());
    let mut envoy = Envoy::<C>::start(Ordering::default(), Arc::clone(&old));
    let known = [Arc::clone(&new), Arc::clone(&old)];
    come_back(&mut envoy, &[Listener, Endpoint, Route], &new, &known);
    envoy.run(Instant::now());
    assert!(
        envoy.first(sends(Route, "r")).is_none(),
        "{:?}",
        envoy.trace()
    );
    assert!(
        envoy.first(|g| g.kind == Cluster).is_none(),
        "{:?}",
        envoy.trace()
    );
    // Its CDS request, once what it has is warm: the cut-over goes in order.
    envoy.client.claim(Cluster, &envoy.proxy);
    envoy.client.stream_mut().handle_history(&known);
    envoy.run(Instant::now());
    let t = envoy.trace();
    let add_y = envoy.first(sends(Cluster, "y")).expect("CDS with y");
    let rds = envoy.first(sends(Route, "r")).expect("the route moves");
    let remove_x = envoy.first(removes("x")).expect("x removed");
    assert!(add_y < rds && rds < remove_x, "{t:?}");
    assert_eq!(route_to(&envoy, "r"), ["y"]);
}

/// A proxy back holding routes the server does not keep (edits it missed), but clusters it
/// does: its routes are withheld until it has completed the newest clusters, then go.
fn reconnect_holding_unknown_routes_gets_them_only_after_the_clusters<C: Client>() {
    let (old, new) = (base().snapshot(), cut_over().snapshot());
    let mut envoy = Envoy::<C>::start(Ordering::default(), Arc::clone(&old));
    envoy.client = envoy.client.reconnect(Ordering::default(), &envoy.proxy);
    envoy.answer = silent_on_cds;
    envoy.client.snapshot(Arc::clone(&new));
    // Known: the newest, and a snapshot with the old clusters but another route `r`.
    let other_routes = Mesh {
        routes: vec![("r", "w")],
        ..base()
    }
    .snapshot();
    let clusters_only = Arc::new(Snapshot::from_types(ResourceType::ALL.map(|k| {
        Arc::clone(if k == Cluster || k == Endpoint {
            old.get(k)
        } else {
            other_routes.get(k)
        })
    })));
    envoy
        .client
        .stream_mut()
        .handle_history(&[Arc::clone(&new), clusters_only]);
    envoy.run(Instant::now());
    let t = envoy.trace();
    assert!(envoy.first(sends(Route, "r")).is_none(), "{t:?}");
    assert!(came_back(&mut envoy, Route, false));
    let cds = last_cds(&envoy);
    envoy.answer = super::ack_all;
    envoy.ack(&cds);
    envoy.run(Instant::now());
    assert_eq!(route_to(&envoy, "r"), ["y"], "{:?}", envoy.trace());
}

/// Whether the stream reported the proxy back holding `kind` (`ordered`: content it keeps);
/// prints the events when not.
fn came_back<C: Client>(envoy: &mut Envoy<C>, kind: ResourceType, ordered: bool) -> bool {
    let events = envoy.client.events();
    let found = events.contains(&Event::Plan(PlanEvent::Reconnected { kind, ordered }));
    if !found {
        eprintln!("no Reconnected {{ {kind}, ordered: {ordered} }} in {events:?}");
    }
    found
}

/// Its stream ends and it comes back, with the first request of each of `kinds` saying what
/// it holds, to a server whose newest snapshot is `new` and that knows `known`.
fn come_back<C: Client>(
    envoy: &mut Envoy<C>,
    kinds: &[ResourceType],
    new: &Arc<Snapshot>,
    known: &[Arc<Snapshot>],
) {
    let mut back = envoy.client.reopen(Ordering::default());
    for &kind in kinds {
        back.claim(kind, &envoy.proxy);
    }
    envoy.client = back;
    envoy.client.snapshot(Arc::clone(new));
    envoy.client.stream_mut().handle_history(known);
}

/// The proxy holds `name` of `kind` at a version of its own, which no snapshot has (a mixture
/// a NACK left it with, say), naming `refs`.
fn holds_its_own<C: Client>(
    envoy: &mut Envoy<C>,
    kind: ResourceType,
    name: &str,
    refs: &[(ResourceType, &str)],
) {
    let odd = super::res(kind, name, "its own", refs);
    let have = envoy.proxy.have.entry(kind).or_default();
    have.insert(name.to_string(), odd);
}

/// Route `r` cut over from `x` to a new `y`, `x` removed.
fn cut_over() -> Mesh {
    Mesh {
        clusters: vec![("y", "1")],
        routes: vec![("r", "y")],
        ..base()
    }
}

sotw_and_delta!(
    reconnect_holding_an_older_generation_is_brought_in_order,
    reconnect_holding_unknown_content_falls_back_and_says_so,
    reconnect_holding_a_plan_step_is_recognised,
    reconnect_whose_cds_request_comes_last_moves_no_route_before_it,
    reconnect_holding_unknown_routes_gets_them_only_after_the_clusters,
);

/// A proxy back on a new stream to a server whose newest snapshot is empty: its listeners go
/// before the clusters their routes name.
fn reconnect_to_an_empty_snapshot_removes_listeners_first<C: Client>() {
    let old = base().snapshot();
    let empty = Mesh::default().snapshot();
    let mut envoy = Envoy::<C>::start(Ordering::default(), Arc::clone(&old));
    let known = [Arc::clone(&empty), Arc::clone(&old)];
    come_back(&mut envoy, &[Listener, Endpoint, Route], &empty, &known);
    envoy.run(Instant::now());
    envoy.client.claim(Cluster, &envoy.proxy);
    envoy.client.stream_mut().handle_history(&known);
    envoy.run(Instant::now());
    assert!(envoy.holds(Cluster).is_empty(), "{:?}", envoy.trace());
    assert!(envoy.holds(Listener).is_empty(), "{:?}", envoy.trace());
}

/// A listener new to a proxy back on a new stream (it held none) while a cluster its route
/// names still warms there: nothing naming clusters goes before its CDS request.
fn reconnect_gets_a_new_listener_only_after_its_cds_request<C: Client>() {
    let old = Mesh {
        listeners: vec![],
        ..to_y()
    }
    .snapshot();
    let new = to_y().snapshot();
    let mut envoy = Envoy::<C>::start(Ordering::default(), Arc::clone(&old));
    let known = [Arc::clone(&new), Arc::clone(&old)];
    come_back(&mut envoy, &[Listener, Endpoint], &new, &known);
    envoy.run(Instant::now());
    assert!(
        envoy.first(|g| g.kind == Listener).is_none(),
        "{:?}",
        envoy.trace()
    );
    envoy.client.claim(Cluster, &envoy.proxy);
    envoy.client.stream_mut().handle_history(&known);
    envoy.run(Instant::now());
    assert_eq!(envoy.holds(Listener), ["l"], "{:?}", envoy.trace());
    assert_eq!(route_to(&envoy, "r"), ["y"]);
}

sotw_and_delta!(
    reconnect_to_an_empty_snapshot_removes_listeners_first,
    reconnect_gets_a_new_listener_only_after_its_cds_request,
);

/// Delta: a proxy back holding a cluster at a version no replica keeps (a mixture a NACK left
/// it with), which its route still names and the newest removes: the removal waits until it
/// has the route that moved off it.
#[test]
fn reconnect_delta_removes_a_cluster_claimed_at_an_unknown_version_after_the_route_moves() {
    let (old, new) = (base().snapshot(), cut_over().snapshot());
    let mut envoy = Envoy::<Delta>::start(Ordering::default(), Arc::clone(&old));
    // It holds x at a version of its own.
    holds_its_own(&mut envoy, Cluster, "x", &[]);
    let known = [Arc::clone(&new), Arc::clone(&old)];
    come_back(
        &mut envoy,
        &[Cluster, Listener, Endpoint, Route],
        &new,
        &known,
    );
    envoy.run(Instant::now());
    let t = envoy.trace();
    let rds = envoy.first(sends(Route, "r")).expect("the route moves");
    let remove_x = envoy.first(removes("x")).expect("x removed");
    assert!(rds < remove_x, "{t:?}");
    assert_eq!(envoy.holds(Cluster), ["y"]);
}

/// Delta: a proxy back holding a second listener at a version no replica keeps, whose route
/// names `x`; the newest has neither that listener nor `x`. The listener's removal is
/// deferred until the update is complete, and the plan's removal of `x` waits for it.
#[test]
fn reconnect_delta_removes_a_cluster_only_after_an_unknown_listener_naming_it() {
    let two = Mesh {
        routes: vec![("r", "x"), ("r2", "x")],
        listeners: vec![("l", "r"), ("l2", "r2")],
        ..base()
    };
    let (old, new) = (two.snapshot(), cut_over().snapshot());
    let mut envoy = Envoy::<Delta>::start(Ordering::default(), Arc::clone(&old));
    // It holds l2 at a version of its own (still naming r2).
    holds_its_own(&mut envoy, Listener, "l2", &[(Route, "r2")]);
    let known = [Arc::clone(&new), Arc::clone(&old)];
    come_back(
        &mut envoy,
        &[Cluster, Listener, Endpoint, Route],
        &new,
        &known,
    );
    envoy.run(Instant::now());
    let t = envoy.trace();
    let drop_l2 = envoy
        .first(|g| g.kind == Listener && g.removed.iter().any(|r| r == "l2"))
        .expect("l2 removed");
    let remove_x = envoy.first(removes("x")).expect("x removed");
    assert!(drop_l2 < remove_x, "{t:?}");
    assert_eq!(envoy.holds(Cluster), ["y"]);
    assert_eq!(envoy.holds(Listener), ["l"]);
}
