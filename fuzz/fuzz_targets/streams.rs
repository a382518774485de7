//! The SotW and delta state machines (ADS, ordering on) on arbitrary sequences of requests
//! (subscriptions, ACKs, NACKs, stale and unknown nonces, several types) and snapshots,
//! with time moving: they must never panic, and every response must be well formed (a fresh
//! nonce, no name twice).
#![no_main]

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arbitrary::Arbitrary;
use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::service::discovery::v3::{DeltaDiscoveryRequest, DiscoveryRequest};
use envoy_types::pb::google::rpc::Status;
use libfuzzer_sys::fuzz_target;
use switchyard::cache::Snapshot;
use switchyard::protocol::{DeltaStream, SotwStream, Variant};
use switchyard::resource::{Resource, ResourceType};

const NAMES: [&str; 4] = ["a", "b", "c", "*"];

#[derive(Arbitrary, Debug)]
enum Op {
    /// A request for type `kind % 9`: names by index, the nonce of the `nonce`-th latest
    /// response (or none, or a made-up one), a NACK or not.
    Request {
        kind: u8,
        names: Vec<u8>,
        unsubscribe: Vec<u8>,
        nonce: u8,
        nack: bool,
    },
    /// A new snapshot: (type, name, content) by index; a cluster may name an endpoint, a
    /// route a cluster, a listener a route.
    Snapshot(Vec<(u8, u8, u8)>),
    /// Time passes (TTL refreshes, plan time-outs).
    Wait(u16),
}

#[derive(Arbitrary, Debug)]
struct Run {
    delta: bool,
    ops: Vec<Op>,
}

fn kind(k: u8) -> ResourceType {
    ResourceType::ALL[k as usize % ResourceType::ALL.len()]
}

fn snapshot(items: &[(u8, u8, u8)]) -> Arc<Snapshot> {
    let resources: Vec<Arc<Resource>> = items
        .iter()
        .map(|(k, n, c)| {
            let kind = kind(*k);
            let name = NAMES[*n as usize % 3];
            let refs = match kind {
                ResourceType::Route => vec![(ResourceType::Cluster, name.to_string())],
                ResourceType::Listener => vec![(ResourceType::Route, name.to_string())],
                _ => vec![],
            };
            let warms = (kind == ResourceType::Cluster).then(|| name.to_string());
            let mut r =
                Resource::new(kind, name, format!("v{c}"), vec![*c], warms).with_references(refs);
            if c % 5 == 0 {
                r = r.with_ttl(Some(Duration::from_secs(1 + u64::from(*c % 3))));
            }
            Arc::new(r)
        })
        .collect();
    Arc::new(Snapshot::from_resources(&resources))
}

fn node() -> Node {
    Node {
        id: "fuzz".into(),
        cluster: "c".into(),
        client_features: vec![
            "xds.config.supports-resource-ttl".into(),
            "xds.config.resource-in-sotw".into(),
        ],
        ..Default::default()
    }
}

fn names(list: &[u8]) -> Vec<String> {
    list.iter()
        .map(|i| NAMES[*i as usize % NAMES.len()].to_string())
        .collect()
}

fuzz_target!(|run: Run| {
    let mut now = Instant::now();
    let mut nonces: Vec<String> = Vec::new();
    let mut sotw = SotwStream::new(Variant::Aggregated);
    let mut delta = DeltaStream::new(Variant::Aggregated);
    for op in run.ops.into_iter().take(64) {
        match op {
            Op::Snapshot(items) => {
                let s = snapshot(&items[..items.len().min(12)]);
                if run.delta {
                    delta.handle_snapshot(s);
                } else {
                    sotw.handle_snapshot(s);
                }
            }
            Op::Wait(ms) => now += Duration::from_millis(u64::from(ms)),
            Op::Request {
                kind: k,
                names: n,
                unsubscribe,
                nonce,
                nack,
            } => {
                let nonce = match nonce % 4 {
                    0 => String::new(),
                    1 => "made-up".to_string(),
                    _ => nonces
                        .iter()
                        .rev()
                        .nth(usize::from(nonce) % 3)
                        .cloned()
                        .unwrap_or_default(),
                };
                let error = nack.then(|| Status {
                    code: 3,
                    message: "no".into(),
                    details: vec![],
                });
                let result = if run.delta {
                    delta.handle_request(DeltaDiscoveryRequest {
                        node: Some(node()),
                        type_url: kind(k).type_url().into(),
                        resource_names_subscribe: names(&n),
                        resource_names_unsubscribe: names(&unsubscribe),
                        response_nonce: nonce,
                        error_detail: error,
                        ..Default::default()
                    })
                } else {
                    sotw.handle_request(DiscoveryRequest {
                        node: Some(node()),
                        type_url: kind(k).type_url().into(),
                        resource_names: names(&n),
                        response_nonce: nonce,
                        error_detail: error,
                        ..Default::default()
                    })
                };
                // Every request here is well formed (one node, known types).
                assert!(result.is_ok(), "{result:?}");
            }
        }
        // Drain, checking each response; bounded (a loop would be a bug).
        for _ in 0..64 {
            let (nonce, names): (String, Vec<String>) = if run.delta {
                let Some(r) = delta.poll_response(now) else {
                    break;
                };
                let mut all: Vec<String> = r
                    .resources
                    .iter()
                    .map(|d| d.resource.name.clone())
                    .collect();
                all.extend(r.removed.iter().cloned());
                (r.nonce, all)
            } else {
                let Some(r) = sotw.poll_response(now) else {
                    break;
                };
                (
                    r.nonce,
                    r.resources.iter().map(|r| r.name.clone()).collect(),
                )
            };
            assert!(!nonces.contains(&nonce), "a nonce used twice (P2)");
            nonces.push(nonce);
            let unique: BTreeSet<&String> = names.iter().collect();
            assert_eq!(
                unique.len(),
                names.len(),
                "a name twice in a response (P12)"
            );
        }
        while sotw.poll_event().is_some() || delta.poll_event().is_some() {}
        if let Some(at) = if run.delta {
            delta.poll_timeout()
        } else {
            sotw.poll_timeout()
        } {
            // Once drained, nothing is due already: a time-out in the past would wake the
            // stream task in a loop.
            assert!(at > now, "a time-out in the past after draining");
        }
    }
});
