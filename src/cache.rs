//! The versioned snapshot cache.
//!
//! Owns: the current [`Generation`] (one successfully loaded [`Config`]), the per node group
//! [`Snapshot`]s built from it (once per group per generation, resources shared by `Arc`),
//! per-type versions, and waking every stream when a new generation is published. Under a
//! rollout policy ([`Cache::with_rollouts`]) it holds two generations, the stable one and the
//! candidate the canary nodes get ([`Serving`]), and wakes every stream when a rollout is
//! promoted or aborted; deciding when is `rollout`'s. It also keeps the recent
//! generations before the newest, for proxies that come back on a new stream holding one
//! (`protocol::plan` orders their update from it).
//!
//! A node group is the set of files whose selectors match a node; nodes with the same set
//! share one `Snapshot`. Groups are found lazily, when a node of that group first asks.
//!
//! Must not: parse files (that is `config`), or decide what a stream sends (`protocol`).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Instant, SystemTime};

use tokio::sync::watch;

use crate::config::selector::NodeFacts;
use crate::config::{content_hash, Config};
use crate::resource::{Resource, ResourceType};
pub mod staged;

pub use staged::{NoRollout, Rollout};
use staged::{Phase, Policy};

/// The resources of one type that one node group gets.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TypeSnapshot {
    /// Hash of every (name, version) of this type: changes exactly when the set does.
    pub version: String,
    pub resources: BTreeMap<String, Arc<Resource>>,
    /// Alias -> name (P24; VHDS only).
    pub aliases: HashMap<String, String>,
    changes: Memo<TypeSnapshot, Changes>,
    /// What each shared name set selects of this type (`protocol::subscription`): the
    /// streams of a node group that ask for the same names select once per snapshot.
    pub selections: Memo<BTreeSet<String>, Arc<Selection>, SELECTIONS>,
    /// What a delta client holding a selection gets again of this type when clusters it
    /// was sent warm (P28, `protocol::delta`), by the list of those clusters: the held
    /// selection it was worked out for, and the list.
    pub rewarmed: Memo<[Arc<Resource>], Rewarmed, REWARMED>,
}

/// See [`TypeSnapshot::rewarmed`]: the selection held, and what goes again.
pub type Rewarmed = (Weak<Selection>, Arc<Listed>);

/// How many lists of clusters sent a snapshot remembers the endpoints to send again for.
const REWARMED: usize = 4;

/// What a SotW subscription selects of one type snapshot (`protocol::Subscription::select`),
/// remembered by the snapshot for the streams that ask for the same names.
#[derive(Debug)]
pub struct Selection {
    /// In name order, each once (a list a response of exactly these shares).
    pub resources: Arc<[Arc<Resource>]>,
    /// The version a client holding exactly these has: the type's, for a wildcard; else the
    /// selection's own (`protocol::subscription::selection_version`), so that a client back
    /// on a new stream proves with it what it holds (P13). REST polling answers with the same
    /// versions.
    pub version: String,
    /// What a client holding an older selection lacks of this one (see
    /// [`Selection::lacking_since`]), by the older selection.
    lacking: Memo<Selection, Arc<[usize]>, 4>,
    /// Which of these lists of clusters sent warm (see [`Selection::warmed_by`]).
    warmed: Memo<[Arc<Resource>], Arc<[usize]>, 4>,
    /// What these add to a response, in all (`protocol`'s measure), once asked.
    cost: OnceLock<usize>,
}

impl Selection {
    /// `resources` (in name order, each once), which a client holding them has as `version`.
    pub fn new(resources: Vec<Arc<Resource>>, version: String) -> Selection {
        Selection {
            resources: resources.into(),
            version,
            lacking: Memo::default(),
            warmed: Memo::default(),
            cost: OnceLock::new(),
        }
    }

    /// What these resources add to a response, in all, `cost` telling what each does:
    /// worked out once (the function is always the same one).
    pub fn cost(&self, cost: impl Fn(&Resource) -> usize) -> usize {
        *self
            .cost
            .get_or_init(|| self.resources.iter().map(|r| cost(r)).sum())
    }

    /// Those of these resources that a client holding `before` lacks or has at another
    /// version, in name order. Computed once per pair and shared: the streams of a node
    /// group that asked for the same names held the same selection, and a push moves them
    /// all to the same new one. Linear when computed (a merge; unchanged resources compare
    /// by pointer).
    pub fn lacking_since(&self, before: &Arc<Selection>) -> Vec<&Arc<Resource>> {
        self.lacking_at(before)
            .iter()
            .map(|&i| &self.resources[i])
            .collect()
    }

    /// [`Selection::lacking_since`], as positions in these resources.
    pub fn lacking_at(&self, before: &Arc<Selection>) -> Arc<[usize]> {
        match self.lacking.get(before) {
            Some(found) => found,
            None => {
                let mut old = before.resources.iter().peekable();
                let indices: Arc<[usize]> = self
                    .resources
                    .iter()
                    .enumerate()
                    .filter(|(_, r)| {
                        if old.next_if(|b| Arc::ptr_eq(b, r)).is_some() {
                            return false;
                        }
                        while old.next_if(|b| b.name < r.name).is_some() {}
                        !old.peek()
                            .is_some_and(|b| b.name == r.name && b.version == r.version)
                    })
                    .map(|(i, _)| i)
                    .collect();
                self.lacking.put(before, Arc::clone(&indices));
                indices
            }
        }
    }

    /// Positions in these resources that `clusters` (a list a response sent) warm with
    /// (P28, `protocol::sotw`), as `find` finds them: worked out once per list, for the
    /// streams that were sent it and select these.
    pub fn warmed_by(
        &self,
        clusters: &Arc<[Arc<Resource>]>,
        find: impl FnOnce(&[Arc<Resource>]) -> Vec<usize>,
    ) -> Arc<[usize]> {
        if let Some(found) = self.warmed.get(clusters) {
            return found;
        }
        let found: Arc<[usize]> = find(clusters).into();
        self.warmed.put(clusters, Arc::clone(&found));
        found
    }
}

/// The names whose resource differs between an older type snapshot and a newer one, in
/// name order ([`TypeSnapshot::changed_since`]), each with the newer one's resource.
#[derive(Clone, Debug, Default)]
pub struct Changes {
    pub names: Arc<[String]>,
    /// `now[i]`: the newer snapshot's resource named `names[i]`; `None`: removed.
    pub now: Arc<[Option<Arc<Resource>>]>,
    /// What each shared name set covers of `now`'s resources
    /// (`protocol::Subscription::covers_changes`): the delta streams that subscribe to the
    /// same names ask once per push.
    pub covered: Arc<Memo<BTreeSet<String>, Arc<Covered>, COVERED>>,
    /// Whether any name was removed (some of `now` is `None`).
    pub removes: bool,
}

/// What one name set covers of a push's changes ([`Changes::covered`]), worked out once for
/// the delta streams that subscribe to it.
#[derive(Debug)]
pub struct Covered {
    /// `flags[i]`: whether it covers the `i`th resource of `now` that exists.
    pub flags: Box<[bool]>,
    /// Those covered, in name order.
    pub listed: Listed,
}

/// Resources in name order, each once: a delta response of exactly these, each as the
/// snapshot has it, is this one list, shared by the streams that send it.
#[derive(Debug)]
pub struct Listed {
    pub resources: Arc<[Arc<Resource>]>,
    /// What they add to a response, in all (`cost` of each).
    pub cost: usize,
    /// Whether any of them has a TTL.
    pub ttl: bool,
    /// Whether any of them has aliases (P24).
    pub aliased: bool,
    /// Whether any of them warms with endpoints (a cluster, P28).
    pub warms: bool,
}

impl Listed {
    /// `resources` listed, `cost` telling what each adds to a response.
    pub fn new(resources: Arc<[Arc<Resource>]>, cost: impl Fn(&Resource) -> usize) -> Listed {
        Listed {
            cost: resources.iter().map(|r| cost(r)).sum(),
            ttl: resources.iter().any(|r| r.ttl.is_some()),
            aliased: resources.iter().any(|r| !r.aliases.is_empty()),
            warms: resources.iter().any(|r| r.warms_with.is_some()),
            resources,
        }
    }
}

/// How many name sets a push's changes remember what they cover for (as for selections).
const COVERED: usize = 16;

/// Whether looking `probes` sorted keys up in a sorted collection of `size` is cheaper by a
/// merge (`size + probes` steps) than by a lookup each (`probes * log2(size)`).
pub(crate) fn merge_is_cheaper(probes: usize, size: usize) -> bool {
    let log = (usize::BITS - size.leading_zeros()) as usize;
    size <= probes.saturating_mul(log)
}

/// How many name sets a type snapshot remembers selections for: the kinds of proxy in a
/// node group (each kind asks for its own names), and the wildcard.
const SELECTIONS: usize = 16;

impl TypeSnapshot {
    /// An empty type snapshot, one shared by all.
    pub fn empty() -> Arc<TypeSnapshot> {
        static EMPTY: std::sync::OnceLock<Arc<TypeSnapshot>> = std::sync::OnceLock::new();
        Arc::clone(EMPTY.get_or_init(Arc::default))
    }

    /// A type snapshot of these resources, with its version computed.
    pub fn new(resources: BTreeMap<String, Arc<Resource>>) -> TypeSnapshot {
        let version = content_hash(
            resources
                .values()
                .flat_map(|r| [r.name.as_bytes(), r.version.as_bytes()]),
        );
        let aliases = resources
            .values()
            .flat_map(|r| r.aliases.iter().map(|a| (a.clone(), r.name.clone())))
            .collect();
        TypeSnapshot {
            version,
            resources,
            aliases,
            changes: Memo::default(),
            selections: Memo::default(),
            rewarmed: Memo::default(),
        }
    }

    /// What a subscription to `name` gets: the resource of that name, or the one it is an
    /// alias of (P24), or, for a VHDS namespace (a route configuration's name), every virtual
    /// host in it.
    pub fn resolve<'a>(&'a self, kind: ResourceType, name: &str) -> Vec<&'a Arc<Resource>> {
        if let Some(r) = self.resources.get(name) {
            return vec![r];
        }
        if let Some(r) = self.aliases.get(name).and_then(|n| self.resources.get(n)) {
            return vec![r];
        }
        if kind == ResourceType::LbEndpoint {
            return self.members(name);
        }
        if kind != ResourceType::VirtualHost {
            return Vec::new();
        }
        let prefix = format!("{name}/");
        self.resources
            .range(prefix.clone()..)
            .take_while(|(n, _)| n.starts_with(&prefix))
            .filter(|(_, r)| r.namespace() == Some(name))
            .map(|(_, r)| r)
            .collect()
    }

    /// The resource of each of `names` (in name order, each once), if there is one: merged
    /// with the type's names when that is cheaper than a lookup each.
    pub fn get_sorted<'a>(&'a self, names: &[String]) -> Vec<Option<&'a Arc<Resource>>> {
        if !merge_is_cheaper(names.len(), self.resources.len()) {
            return names.iter().map(|n| self.resources.get(n)).collect();
        }
        let mut resources = self.resources.iter().peekable();
        names
            .iter()
            .map(|name| {
                while resources.next_if(|(n, _)| *n < name).is_some() {}
                resources.next_if(|(n, _)| *n == name).map(|(_, r)| r)
            })
            .collect()
    }

    /// The members of the glob collection `glob` (P34), in name order: its authority, type
    /// and context parameters, one more id segment. Empty for a name that is not a glob.
    pub fn members<'a>(&'a self, glob: &str) -> Vec<&'a Arc<Resource>> {
        let Some(parts) = crate::resource::xdstp::glob_parts(glob) else {
            return Vec::new();
        };
        let prefix = parts.0;
        self.resources
            .range::<str, _>((
                std::ops::Bound::Included(prefix),
                std::ops::Bound::Unbounded,
            ))
            .take_while(|(n, _)| n.starts_with(prefix))
            .filter(|(n, _)| crate::resource::xdstp::is_member(n, parts))
            .map(|(_, r)| r)
            .collect()
    }

    /// The names whose resource differs between `older` and this snapshot: added, changed
    /// (another version) or removed, in name order. Computed once per pair and shared, so
    /// the streams of a node group each pay only for what changed, not for the whole type.
    pub fn changes_since(self: &Arc<Self>, older: &Arc<TypeSnapshot>) -> Arc<[String]> {
        self.changed_since(older).names
    }

    /// [`TypeSnapshot::changes_since`] with this snapshot's resource of each name: what a
    /// delta stream sends of a push, looked up once per pair instead of once per stream.
    pub fn changed_since(self: &Arc<Self>, older: &Arc<TypeSnapshot>) -> Changes {
        if Arc::ptr_eq(self, older) || self.version == older.version {
            return Changes::default();
        }
        if let Some(found) = self.changes.get(older) {
            return found;
        }
        let (mut names, mut now) = (Vec::new(), Vec::new());
        let mut old = older.resources.iter().peekable();
        for (name, r) in &self.resources {
            // A resource no file change touched is the same `Arc` in both (keyed by its name):
            // a pointer compare instead of string compares, for most of a large type.
            if let Some((same, _)) = old.next_if(|(_, o)| Arc::ptr_eq(o, r)) {
                debug_assert_eq!(same, name, "keyed by name");
                continue;
            }
            while let Some((gone, _)) = old.next_if(|(o, _)| *o < name) {
                names.push(gone.clone());
                now.push(None);
            }
            match old.next_if(|(o, _)| *o == name) {
                Some((_, o)) if o.version == r.version => {}
                _ => {
                    names.push(name.clone());
                    now.push(Some(Arc::clone(r)));
                }
            }
        }
        for (gone, _) in old {
            names.push(gone.clone());
            now.push(None);
        }
        let changes = Changes {
            removes: now.iter().any(Option::is_none),
            names: names.into(),
            now: now.into(),
            covered: Arc::default(),
        };
        self.changes.put(older, changes.clone());
        changes
    }
}

/// Recent answers of a function of (an older value, this one), by the older value: what
/// [`TypeSnapshot::changes_since`] and the update plans of `protocol` compute once and share
/// between the streams of a node group. Not part of the value: clones start empty and it
/// never affects equality. Remembers the `N` latest answers.
pub struct Memo<K: ?Sized, V, const N: usize = MEMO_ENTRIES>(Mutex<Vec<(Weak<K>, V)>>);

/// How many older values a value remembers answers for, unless told otherwise.
const MEMO_ENTRIES: usize = 4;

impl<K: ?Sized, V: Clone, const N: usize> Memo<K, V, N> {
    /// The answer remembered for `older`, if any.
    pub fn get(&self, older: &Arc<K>) -> Option<V> {
        let memo = self.0.lock().unwrap_or_else(|p| p.into_inner());
        memo.iter()
            .find(|(w, _)| {
                std::ptr::addr_eq(w.as_ptr(), Arc::as_ptr(older)) && w.strong_count() > 0
            })
            .map(|(_, v)| v.clone())
    }

    /// Remember `value` as the answer for `older` (which the memo does not keep alive).
    pub fn put(&self, older: &Arc<K>, value: V) {
        let mut memo = self.0.lock().unwrap_or_else(|p| p.into_inner());
        memo.retain(|(w, _)| w.strong_count() > 0);
        if memo.len() >= N {
            memo.remove(0);
        }
        memo.push((Arc::downgrade(older), value));
    }
}

impl<K: ?Sized, V, const N: usize> Default for Memo<K, V, N> {
    fn default() -> Self {
        Memo(Mutex::new(Vec::new()))
    }
}

impl<K: ?Sized, V, const N: usize> Clone for Memo<K, V, N> {
    fn clone(&self) -> Self {
        Memo::default()
    }
}

impl<K: ?Sized, V, const N: usize> PartialEq for Memo<K, V, N> {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl<K: ?Sized, V, const N: usize> Eq for Memo<K, V, N> {}

impl<K: ?Sized, V, const N: usize> std::fmt::Debug for Memo<K, V, N> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Memo")
    }
}

/// Everything one node group gets, every type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snapshot {
    /// Shared by `Arc` so a stream can remember what it sent as a pointer, not a copy.
    types: [Arc<TypeSnapshot>; ResourceType::ALL.len()],
    /// The make-before-break steps from an older snapshot to this one, computed by
    /// `protocol::plan` once per pair and shared by the streams of a node group.
    pub plans: Memo<Snapshot, PlanSteps>,
}

/// The steps of a plan before its end, and its end when that is not the newer snapshot
/// itself (it keeps something the newer one removes but still refers to). Never the newer
/// snapshot itself, which would keep it alive through its own memo.
pub type PlanSteps = Arc<(Vec<Arc<Snapshot>>, Option<Arc<Snapshot>>)>;

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
        Snapshot::from_types(by_type.map(|resources| Arc::new(TypeSnapshot::new(resources))))
    }

    /// A snapshot of these type snapshots (shared, not copied).
    pub fn from_types(types: [Arc<TypeSnapshot>; ResourceType::ALL.len()]) -> Snapshot {
        Snapshot {
            types,
            plans: Memo::default(),
        }
    }

    /// This snapshot with each type that `older` has at the same version taken from
    /// `older` (the same resources, by their content hashes): a stream that holds it then
    /// sees by a pointer compare that nothing changed, instead of comparing every name, and
    /// the unchanged types' resources are kept once.
    pub fn reusing(self, older: &Snapshot) -> Snapshot {
        let mut types = self.types;
        for (new, old) in types.iter_mut().zip(&older.types) {
            if new.version == old.version {
                *new = Arc::clone(old);
            }
        }
        Snapshot::from_types(types)
    }

    /// Whether every type has the same version in both (the same resources).
    pub fn same_as(&self, other: &Snapshot) -> bool {
        self.types
            .iter()
            .zip(&other.types)
            .all(|(a, b)| Arc::ptr_eq(a, b) || a.version == b.version)
    }

    /// The resources of one type.
    pub fn get(&self, kind: ResourceType) -> &Arc<TypeSnapshot> {
        &self.types[kind.index()]
    }
}

/// A node group's snapshot, built by the first stream that needs it, and the node (id,
/// cluster) that first asked for it.
type SnapshotCell = Arc<(OnceLock<Arc<Snapshot>>, NodeFacts)>;

/// A node group that a new configuration would leave without any resource of a type it has
/// now (see [`Cache::emptied_groups`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EmptiedGroup {
    /// A node of the group: id and cluster.
    pub node: (String, String),
    pub kind: ResourceType,
    /// How many it has now.
    pub now: usize,
}

/// One published configuration, and the snapshots built from it so far.
#[derive(Debug)]
pub struct Generation {
    /// Counts publications from 1; 0 is the empty cache before the first load.
    pub number: u64,
    /// When it was published (for push and convergence latencies).
    pub published: Instant,
    pub config: Arc<Config>,
    /// Node group (the indices of its files) -> its snapshot, built at most once. The lock
    /// guards only the map; building happens outside it, so one group's build does not hold
    /// up lookups of the others.
    groups: Mutex<HashMap<Vec<usize>, SnapshotCell>>,
    /// The node groups' snapshots of the generation published before this one, while
    /// streams still hold them: a group's snapshot takes the types it has unchanged from
    /// there ([`Snapshot::reusing`]).
    previous: HashMap<Vec<usize>, Weak<Snapshot>>,
}

impl Generation {
    fn new(
        number: u64,
        config: Arc<Config>,
        previous: HashMap<Vec<usize>, Weak<Snapshot>>,
    ) -> Generation {
        Generation {
            number,
            published: Instant::now(),
            config,
            groups: Mutex::new(HashMap::new()),
            previous,
        }
    }

    /// The snapshot for a node: the union of every file whose selector matches it. Built once
    /// per node group and generation.
    pub fn snapshot_for(&self, node: &NodeFacts) -> Arc<Snapshot> {
        let group: Vec<usize> = self
            .config
            .files
            .iter()
            .enumerate()
            .filter(|(_, f)| f.selector.matches(node))
            .map(|(i, _)| i)
            .collect();
        // A poisoned lock only means another thread panicked while inserting; the map is
        // still a valid memo, so keep using it.
        let cell = {
            let mut groups = self.groups.lock().unwrap_or_else(|p| p.into_inner());
            Arc::clone(
                groups
                    .entry(group.clone())
                    .or_insert_with(|| Arc::new((OnceLock::new(), node.clone()))),
            )
        };
        let snapshot = cell.0.get_or_init(|| {
            let built = Snapshot::from_resources(
                group
                    .iter()
                    .flat_map(|&i| self.config.files[i].resources.iter()),
            );
            // A group of the same files in the generation before (the same files, unless
            // files came or went: versions decide what is reused either way).
            let before = self.previous.get(&group).and_then(Weak::upgrade);
            Arc::new(match before {
                Some(before) => built.reusing(&before),
                None => built,
            })
        });
        Arc::clone(snapshot)
    }

    /// The node groups built so far (their files' indices) and their snapshots.
    pub fn groups(&self) -> Vec<(Vec<usize>, Arc<Snapshot>)> {
        let groups = self.groups.lock().unwrap_or_else(|p| p.into_inner());
        let mut built: Vec<_> = groups
            .iter()
            .filter_map(|(files, cell)| cell.0.get().map(|s| (files.clone(), Arc::clone(s))))
            .collect();
        built.sort_by(|a, b| a.0.cmp(&b.0));
        built
    }

    /// How many node groups have been built.
    pub fn group_count(&self) -> usize {
        self.groups.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}

/// What the cache serves: the stable generation, and during a staged rollout the candidate
/// generation that the canary nodes get.
#[derive(Debug)]
pub struct Serving {
    pub stable: Arc<Generation>,
    pub rollout: Option<Rollout>,
    /// The generations published before the newest, newest first, as many as the cache
    /// keeps ([`Cache::keeping`]): what a proxy that reconnects mid-change may still hold,
    /// so that its stream can recognise it by its versions and bring it to the newest
    /// make-before-break (`protocol::plan`), and where the content a proxy that NACKs still
    /// runs is looked for (`/status`'s `last_good`).
    pub recent: Arc<[Arc<Generation>]>,
}

/// How many generations a server keeps by default (`serve --keep-generations`): the newest
/// and the two before it.
pub const DEFAULT_KEPT: usize = 3;

impl Serving {
    /// The newest generation: the candidate during a rollout, else the stable one.
    pub fn newest(&self) -> &Arc<Generation> {
        self.rollout.as_ref().map_or(&self.stable, |r| &r.candidate)
    }

    /// Every generation a proxy may hold content of: the stable one, a rollout's candidate,
    /// and the recent ones (some may repeat).
    pub fn known(&self) -> impl Iterator<Item = &Arc<Generation>> {
        std::iter::once(&self.stable)
            .chain(self.rollout.as_ref().map(|r| &r.candidate))
            .chain(self.recent.iter())
    }

    /// The generation a node gets: the candidate for a canary during a rollout, else the
    /// stable one.
    pub fn for_node(&self, node: &NodeFacts) -> &Arc<Generation> {
        match &self.rollout {
            Some(r) if r.policy.is_canary(&node.id, &node.cluster) => &r.candidate,
            _ => &self.stable,
        }
    }
}

/// The cache: what is served, and a watch every stream holds to learn of changes (a new
/// generation, or a rollout promoted or aborted).
#[derive(Debug)]
pub struct Cache {
    current: watch::Sender<Arc<Serving>>,
    /// With a policy, each new generation after the first is rolled out to canaries first.
    policy: Option<Arc<Policy>>,
    /// The last generation number given (an aborted candidate's number is not reused).
    numbered: std::sync::atomic::AtomicU64,
    /// How many generations before the newest are kept.
    recent: usize,
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
        let empty = Arc::new(Generation::new(
            0,
            Arc::new(Config::default()),
            HashMap::new(),
        ));
        let (current, _) = watch::channel(Arc::new(Serving {
            stable: empty,
            rollout: None,
            recent: Arc::new([]),
        }));
        Cache {
            current,
            policy: None,
            numbered: std::sync::atomic::AtomicU64::new(0),
            recent: DEFAULT_KEPT - 1,
        }
    }

    /// Keep `generations` generations (the newest and those before it; at least 1).
    pub fn keeping(self, generations: usize) -> Cache {
        Cache {
            recent: generations.max(1) - 1,
            ..self
        }
    }

    /// How many generations it keeps (the newest and those before it).
    pub fn kept(&self) -> usize {
        self.recent + 1
    }

    /// An empty cache that rolls each new generation (after the first) out to the canaries
    /// of `policy` first.
    pub fn with_rollouts(policy: Policy) -> Cache {
        Cache {
            policy: Some(Arc::new(policy)),
            ..Cache::new()
        }
    }

    /// The rollout policy, if any.
    pub fn policy(&self) -> Option<&Policy> {
        self.policy.as_deref()
    }

    /// Number the next generation after `last` (a number published before a restart, kept
    /// in `--state-dir`), so that numbers never repeat. Never goes back.
    pub fn number_after(&self, last: u64) {
        self.numbered
            .fetch_max(last, std::sync::atomic::Ordering::Relaxed);
    }

    /// Swap in a new configuration, whole, and wake every stream. Under a rollout policy it
    /// becomes the candidate of a new rollout (replacing any rollout in progress, from the
    /// same stable generation), except the first, which every node gets.
    pub fn publish(&self, config: Config) -> Arc<Generation> {
        let mut published = None;
        self.current.send_modify(|serving| {
            let number = self
                .numbered
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
                + 1;
            let previous = serving
                .newest()
                .groups()
                .into_iter()
                .map(|(group, snapshot)| (group, Arc::downgrade(&snapshot)))
                .collect();
            let generation = Arc::new(Generation::new(number, Arc::new(config), previous));
            published = Some(Arc::clone(&generation));
            let recent: Arc<[Arc<Generation>]> = std::iter::once(serving.newest())
                .chain(serving.recent.iter())
                .filter(|g| g.number > 0)
                .take(self.recent)
                .cloned()
                .collect();
            *serving = Arc::new(match &self.policy {
                Some(policy) if serving.stable.number > 0 => Serving {
                    stable: Arc::clone(&serving.stable),
                    rollout: Some(Rollout {
                        candidate: generation,
                        policy: Arc::clone(policy),
                        phase: Phase::Canary,
                        since: SystemTime::now(),
                    }),
                    recent,
                },
                _ => Serving {
                    stable: generation,
                    rollout: None,
                    recent,
                },
            });
        });
        published.unwrap_or_else(|| self.current())
    }

    /// The newest generation (during a rollout, the candidate).
    pub fn current(&self) -> Arc<Generation> {
        Arc::clone(self.current.borrow().newest())
    }

    /// What is served now.
    pub fn serving(&self) -> Arc<Serving> {
        Arc::clone(&self.current.borrow())
    }

    /// The generation a node gets now.
    pub fn for_node(&self, node: &NodeFacts) -> Arc<Generation> {
        Arc::clone(self.current.borrow().for_node(node))
    }

    /// The node groups built so far (those with a node connected since the generation was
    /// published) that `config` would leave without any listener or any cluster where they
    /// have some now: a mass removal that is far more often a broken deploy of the files than
    /// intent.
    pub fn emptied_groups(&self, config: &Config) -> Vec<EmptiedGroup> {
        let current = self.current();
        let groups: Vec<SnapshotCell> = current
            .groups
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect();
        let mut emptied = Vec::new();
        for cell in groups {
            let (built, node) = &*cell;
            let Some(now) = built.get() else {
                continue;
            };
            for kind in [ResourceType::Listener, ResourceType::Cluster] {
                let had = now.get(kind).resources.len();
                let will = config
                    .files
                    .iter()
                    .filter(|f| f.selector.matches(node))
                    .flat_map(|f| &f.resources)
                    .filter(|r| r.kind == kind)
                    .count();
                if had > 0 && will == 0 {
                    emptied.push(EmptiedGroup {
                        node: (node.id.clone(), node.cluster.clone()),
                        kind,
                        now: had,
                    });
                }
            }
        }
        emptied.sort_by(|a, b| a.node.cmp(&b.node).then(a.kind.cmp(&b.kind)));
        emptied
    }

    /// A receiver that sees every later publication, promotion and abort.
    pub fn subscribe(&self) -> watch::Receiver<Arc<Serving>> {
        self.current.subscribe()
    }
}

#[cfg(test)]
mod tests;
