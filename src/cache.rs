//! The versioned snapshot cache.
//!
//! Owns: the current [`Generation`] (one successfully loaded [`Config`]), the per node group
//! [`Snapshot`]s built from it (once per group per generation, resources shared by `Arc`),
//! per-type versions, and waking every stream when a new generation is published.
//!
//! A node group is the set of files whose selectors match a node; nodes with the same set
//! share one `Snapshot`. Groups are found lazily, when a node of that group first asks.
//!
//! Must not: parse files (that is `config`), or decide what a stream sends (`protocol`).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, OnceLock};

use tokio::sync::watch;

use crate::config::{content_hash, Config};
use crate::resource::{Resource, ResourceType};

/// The resources of one type that one node group gets.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TypeSnapshot {
    /// Hash of every (name, version) of this type: changes exactly when the set does.
    pub version: String,
    pub resources: BTreeMap<String, Arc<Resource>>,
}

impl TypeSnapshot {
    /// A type snapshot of these resources, with its version computed.
    pub fn new(resources: BTreeMap<String, Arc<Resource>>) -> TypeSnapshot {
        let version = content_hash(
            resources
                .values()
                .flat_map(|r| [r.name.as_bytes(), r.version.as_bytes()]),
        );
        TypeSnapshot { version, resources }
    }
}

/// Everything one node group gets, every type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snapshot {
    /// Shared by `Arc` so a stream can remember what it sent as a pointer, not a copy.
    types: [Arc<TypeSnapshot>; ResourceType::ALL.len()],
}

impl Default for Snapshot {
    fn default() -> Self {
        Snapshot::from_resources(std::iter::empty())
    }
}

impl Snapshot {
    /// A snapshot of these resources. The caller guarantees names are unique per type
    /// (`config` rejects duplicates); a repeated name keeps the last.
    pub fn from_resources<'a>(resources: impl IntoIterator<Item = &'a Arc<Resource>>) -> Snapshot {
        let mut by_type: [BTreeMap<String, Arc<Resource>>; ResourceType::ALL.len()] =
            Default::default();
        for r in resources {
            by_type[r.kind.index()].insert(r.name.clone(), Arc::clone(r));
        }
        Snapshot {
            types: by_type.map(|resources| Arc::new(TypeSnapshot::new(resources))),
        }
    }

    /// The resources of one type.
    pub fn get(&self, kind: ResourceType) -> &Arc<TypeSnapshot> {
        &self.types[kind.index()]
    }
}

/// A node group's snapshot, built by the first stream that needs it.
type SnapshotCell = Arc<OnceLock<Arc<Snapshot>>>;

/// One published configuration, and the snapshots built from it so far.
#[derive(Debug)]
pub struct Generation {
    /// Counts publications from 1; 0 is the empty cache before the first load.
    pub number: u64,
    pub config: Arc<Config>,
    /// Node group (the indices of its files) -> its snapshot, built at most once. The lock
    /// guards only the map; building happens outside it, so one group's build does not hold
    /// up lookups of the others.
    groups: Mutex<HashMap<Vec<usize>, SnapshotCell>>,
}

impl Generation {
    fn new(number: u64, config: Arc<Config>) -> Generation {
        Generation {
            number,
            config,
            groups: Mutex::new(HashMap::new()),
        }
    }

    /// The snapshot for a node: the union of every file whose selector matches it. Built once
    /// per node group and generation.
    pub fn snapshot_for(&self, node_id: &str, node_cluster: &str) -> Arc<Snapshot> {
        let group: Vec<usize> = self
            .config
            .files
            .iter()
            .enumerate()
            .filter(|(_, f)| f.selector.matches(node_id, node_cluster))
            .map(|(i, _)| i)
            .collect();
        // A poisoned lock only means another thread panicked while inserting; the map is
        // still a valid memo, so keep using it.
        let cell = {
            let mut groups = self.groups.lock().unwrap_or_else(|p| p.into_inner());
            Arc::clone(groups.entry(group.clone()).or_default())
        };
        let snapshot = cell.get_or_init(|| {
            Arc::new(Snapshot::from_resources(
                group
                    .iter()
                    .flat_map(|&i| self.config.files[i].resources.iter()),
            ))
        });
        Arc::clone(snapshot)
    }

    /// How many node groups have been built.
    pub fn group_count(&self) -> usize {
        self.groups.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}

/// The cache: the current generation, and a watch every stream holds to learn of the next.
#[derive(Debug)]
pub struct Cache {
    current: watch::Sender<Arc<Generation>>,
}

impl Default for Cache {
    fn default() -> Self {
        Cache::new()
    }
}

impl Cache {
    /// An empty cache (generation 0: no resources). Streams opened now get nothing until the
    /// first [`Cache::publish`].
    pub fn new() -> Cache {
        let (current, _) =
            watch::channel(Arc::new(Generation::new(0, Arc::new(Config::default()))));
        Cache { current }
    }

    /// Swap in a new configuration, whole, and wake every stream.
    pub fn publish(&self, config: Config) -> Arc<Generation> {
        let number = self.current.borrow().number + 1;
        let generation = Arc::new(Generation::new(number, Arc::new(config)));
        self.current.send_replace(Arc::clone(&generation));
        generation
    }

    /// The current generation.
    pub fn current(&self) -> Arc<Generation> {
        Arc::clone(&self.current.borrow())
    }

    /// A receiver that sees every later publication.
    pub fn subscribe(&self) -> watch::Receiver<Arc<Generation>> {
        self.current.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{NodeMatch, Selector, SnapshotFile};
    use bytes::Bytes;

    fn res(kind: ResourceType, name: &str, content: &str) -> Arc<Resource> {
        Arc::new(Resource::new(
            kind,
            name,
            content_hash([content.as_bytes()]),
            content.as_bytes().to_vec(),
            None,
        ))
    }

    fn file(selector: Selector, resources: Vec<Arc<Resource>>) -> SnapshotFile {
        SnapshotFile {
            path: "f.yaml".into(),
            selector,
            resources,
        }
    }

    fn id_glob(glob: &str) -> Selector {
        Selector::new(vec![NodeMatch {
            id: Some(glob.into()),
            cluster: None,
        }])
        .expect("valid")
    }

    #[test]
    fn type_version_follows_content_only() {
        let a = Snapshot::from_resources(&[res(ResourceType::Cluster, "a", "1")]);
        let a2 = Snapshot::from_resources(&[res(ResourceType::Cluster, "a", "1")]);
        let b = Snapshot::from_resources(&[res(ResourceType::Cluster, "a", "2")]);
        let c = Snapshot::from_resources(&[
            res(ResourceType::Cluster, "a", "1"),
            res(ResourceType::Listener, "l", "1"),
        ]);
        let cds = |s: &Snapshot| s.get(ResourceType::Cluster).version.clone();
        assert_eq!(cds(&a), cds(&a2));
        assert_ne!(cds(&a), cds(&b));
        // Another type changing leaves CDS's version alone.
        assert_eq!(cds(&a), cds(&c));
        assert_ne!(
            a.get(ResourceType::Listener).version,
            c.get(ResourceType::Listener).version
        );
    }

    #[test]
    fn node_groups_are_unions_of_matching_files_built_once() {
        let cache = Cache::new();
        cache.publish(Config {
            files: vec![
                file(
                    Selector::all(),
                    vec![res(ResourceType::Cluster, "shared", "x")],
                ),
                file(
                    id_glob("edge-*"),
                    vec![res(ResourceType::Cluster, "edge", "x")],
                ),
            ],
            warnings: vec![],
        });
        let generation = cache.current();
        let edge = generation.snapshot_for("edge-1", "");
        let names: Vec<_> = edge
            .get(ResourceType::Cluster)
            .resources
            .keys()
            .cloned()
            .collect();
        assert_eq!(names, ["edge", "shared"]);
        let core = generation.snapshot_for("core-1", "");
        assert_eq!(core.get(ResourceType::Cluster).resources.len(), 1);
        // Same group, same Arc: built once, shared.
        assert!(Arc::ptr_eq(&edge, &generation.snapshot_for("edge-2", "")));
        assert_eq!(generation.group_count(), 2);
        // Resource bytes are shared between groups, not copied.
        assert!(Arc::ptr_eq(
            &edge.get(ResourceType::Cluster).resources["shared"],
            &core.get(ResourceType::Cluster).resources["shared"]
        ));
    }

    #[tokio::test]
    async fn publish_wakes_subscribers() {
        let cache = Cache::new();
        let mut rx = cache.subscribe();
        assert_eq!(rx.borrow().number, 0);
        cache.publish(Config::default());
        rx.changed().await.expect("sender alive");
        assert_eq!(rx.borrow_and_update().number, 1);
    }

    /// Model-based check: a snapshot built from random resources equals a plain BTreeMap
    /// model (last write wins per type and name), and its version changes exactly when the
    /// model's content does.
    #[test]
    fn snapshot_matches_btreemap_model() {
        let mut next = crate::testing::rng(0x2545_f491_4f6c_dd1d);
        /// (type index, name) -> content
        type Model = BTreeMap<(usize, String), String>;
        let mut previous: Option<(Model, Snapshot)> = None;
        for _ in 0..200 {
            let mut model = BTreeMap::new();
            let mut items = Vec::new();
            for _ in 0..next(12) {
                let kind = ResourceType::ALL[next(3) as usize];
                let name = format!("r{}", next(5));
                let content = format!("c{}", next(3));
                model.insert((kind.index(), name.clone()), content.clone());
                items.push(res(kind, &name, &content));
            }
            let snap = Snapshot::from_resources(&items);
            for kind in ResourceType::ALL {
                let got: BTreeMap<_, _> = snap
                    .get(kind)
                    .resources
                    .iter()
                    .map(|(n, r)| (n.clone(), r.body.clone()))
                    .collect();
                let want: BTreeMap<_, _> = model
                    .iter()
                    .filter(|((k, _), _)| *k == kind.index())
                    .map(|((_, n), c)| (n.clone(), Bytes::from(c.clone())))
                    .collect();
                assert_eq!(got, want);
            }
            if let Some((prev_model, prev_snap)) = &previous {
                for kind in ResourceType::ALL {
                    let same_model = prev_model
                        .iter()
                        .filter(|((k, _), _)| *k == kind.index())
                        .eq(model.iter().filter(|((k, _), _)| *k == kind.index()));
                    assert_eq!(
                        same_model,
                        prev_snap.get(kind).version == snap.get(kind).version
                    );
                }
            }
            previous = Some((model, snap));
        }
    }
}
