//! What each node's per-type streams refer to, shared between the streams of one node.
//!
//! A node on the per-type services (no ADS) has one stream per type, and those cannot be
//! ordered against each other. What one of them can do is hold back a removal: the CDS
//! stream keeps a removed cluster while the node's RDS stream still holds a route that names
//! it. Each per-type stream publishes here what its client's resources refer to
//! ([`crate::protocol::Stream::references`]), and is woken when a sibling's change, to take
//! in the union of the others' ([`crate::protocol::Stream::handle_peer_references`]).
//!
//! Must not: decide anything (the protocol does); it only passes sets between streams.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use tokio::sync::watch;

use crate::resource::Reference;

/// Every node's per-type streams and what each refers to.
#[derive(Debug, Default)]
pub struct Peers {
    nodes: Mutex<HashMap<String, Node>>,
}

#[derive(Debug)]
struct Node {
    next_id: u64,
    streams: HashMap<u64, Arc<BTreeSet<Reference>>>,
    /// Bumped on every change, to wake the node's streams.
    changed: watch::Sender<u64>,
}

/// One stream's place among its node's peers; leaves when dropped.
#[derive(Debug)]
pub struct PeerHandle {
    peers: Arc<Peers>,
    node: String,
    id: u64,
}

impl Peers {
    /// Join `node`'s streams: a handle, and a receiver that changes whenever any of them
    /// publishes (or leaves).
    pub fn join(self: &Arc<Self>, node: &str) -> (PeerHandle, watch::Receiver<u64>) {
        let mut nodes = self.lock();
        let entry = nodes.entry(node.to_string()).or_insert_with(|| Node {
            next_id: 0,
            streams: HashMap::new(),
            changed: watch::channel(0).0,
        });
        let id = entry.next_id;
        entry.next_id += 1;
        entry.streams.insert(id, Arc::default());
        let handle = PeerHandle {
            peers: Arc::clone(self),
            node: node.to_string(),
            id,
        };
        (handle, entry.changed.subscribe())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Node>> {
        // A poisoned lock only means a panic elsewhere mid-update; the map is still usable.
        self.nodes.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl PeerHandle {
    /// What this stream's client now refers to; wakes the node's other streams.
    pub fn publish(&self, references: BTreeSet<Reference>) {
        let mut nodes = self.peers.lock();
        if let Some(node) = nodes.get_mut(&self.node) {
            node.streams.insert(self.id, Arc::new(references));
            node.changed.send_modify(|n| *n += 1);
        }
    }

    /// What the node's other streams refer to.
    pub fn others(&self) -> Arc<BTreeSet<Reference>> {
        let nodes = self.peers.lock();
        let Some(node) = nodes.get(&self.node) else {
            return Arc::default();
        };
        let mut others = node
            .streams
            .iter()
            .filter(|(id, _)| **id != self.id)
            .map(|(_, refs)| refs);
        match (others.next(), others.next()) {
            (None, _) => Arc::default(),
            // The common case, one sibling: share its set.
            (Some(only), None) => Arc::clone(only),
            (Some(a), Some(b)) => {
                let mut all: BTreeSet<Reference> = a.iter().chain(b.iter()).cloned().collect();
                for refs in others {
                    all.extend(refs.iter().cloned());
                }
                Arc::new(all)
            }
        }
    }
}

impl Drop for PeerHandle {
    fn drop(&mut self) {
        let mut nodes = self.peers.lock();
        if let Some(node) = nodes.get_mut(&self.node) {
            node.streams.remove(&self.id);
            if node.streams.is_empty() {
                nodes.remove(&self.node);
            } else {
                node.changed.send_modify(|n| *n += 1);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resource::ResourceType::Cluster;

    fn refs(names: &[&str]) -> BTreeSet<Reference> {
        names.iter().map(|n| (Cluster, n.to_string())).collect()
    }

    #[test]
    fn a_stream_sees_its_siblings_references_not_its_own_nor_other_nodes() {
        let peers = Arc::new(Peers::default());
        let (cds, mut woken) = peers.join("n1");
        let (rds, _) = peers.join("n1");
        let (other_node, _) = peers.join("n2");
        rds.publish(refs(&["x"]));
        other_node.publish(refs(&["y"]));
        cds.publish(refs(&["z"]));
        assert!(woken.has_changed().unwrap_or(false));
        woken.mark_unchanged();
        assert_eq!(*cds.others(), refs(&["x"]));
        assert_eq!(*rds.others(), refs(&["z"]));
        drop(rds);
        assert!(
            woken.has_changed().unwrap_or(false),
            "a leaving sibling wakes the others"
        );
        assert!(cds.others().is_empty());
        drop(cds);
        assert!(
            peers.lock().get("n1").is_none(),
            "a node with no streams is forgotten"
        );
    }
}
