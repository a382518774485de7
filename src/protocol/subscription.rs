//! What a client subscribes to, for one type on one stream: names and the wildcard.
//!
//! Owns: the names and the wildcard per type, SotW's and delta's changes to them (P6-P9,
//! P19-P21), which resources of a snapshot they select, and the table through which streams
//! asking for the same names share one name set. Must not: know what the client holds or
//! what was sent (the flavors do).

use std::collections::{BTreeSet, HashMap, HashSet};
use std::hash::{BuildHasher, RandomState};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError, Weak};

use crate::cache::{merge_is_cheaper, Changes, Covered, Listed, Selection, TypeSnapshot};
use crate::resource::{xdstp, Resource};

/// The wildcard name (P14).
pub const WILDCARD: &str = "*";

/// One type's subscription on one stream.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Subscription {
    wildcard: bool,
    /// Shared, so that remembering a subscription (what a response was built for) is cheap.
    names: Arc<BTreeSet<String>>,
    /// Whether any name (including `*`) was ever subscribed on this stream (P15).
    named: bool,
    /// Whether a name is an xdstp glob collection (P34), which covers its members.
    globs: bool,
}

impl Subscription {
    /// Whether `other` is this very subscription (the same name set, shared, and the same
    /// wildcard), told without comparing names: `false` may still be an equal one.
    pub fn same(&self, other: &Subscription) -> bool {
        self.wildcard == other.wildcard
            && self.named == other.named
            && (Arc::ptr_eq(&self.names, &other.names)
                || (self.names.is_empty() && other.names.is_empty()))
    }

    /// Apply a State-of-the-World request's `resource_names`, which replace the set (P7).
    /// P15/P16: `[]` before any name means wildcard (legacy); `[*, A]` is wildcard plus A;
    /// `[A]` is A alone; `[]` after names means nothing.
    pub fn apply_sotw(&mut self, resource_names: &[String]) {
        // P35: xdstp names compare in canonical form (opaque names are not copied).
        if xdstp::any(resource_names) {
            return self.apply_sotw_canonical(&xdstp::canonical_all(resource_names));
        }
        self.apply_sotw_canonical(resource_names)
    }

    fn apply_sotw_canonical(&mut self, resource_names: &[String]) {
        if resource_names.is_empty() {
            self.wildcard = !self.named;
            self.names = Arc::default();
            return;
        }
        self.named = true;
        self.wildcard = resource_names.iter().any(|n| n == WILDCARD);
        // Most requests (every ACK) repeat the names: keep the set, and what shares it.
        let mut named: Vec<&str> = resource_names
            .iter()
            .map(String::as_str)
            .filter(|n| *n != WILDCARD)
            .collect();
        named.sort_unstable();
        named.dedup();
        let same = named.len() == self.names.len()
            && named.iter().zip(self.names.iter()).all(|(a, b)| *a == b);
        if !same {
            self.names = NameSets::global().share(&named);
            self.globs = self.names.iter().any(|n| xdstp::is_glob(n));
        }
    }

    /// Apply a delta request's subscribe and unsubscribe lists (P15, P16, P22). `first`: the
    /// first request for this type on the stream, where an empty subscribe list is the legacy
    /// wildcard. Returns what actually changed; phantom unsubscribes change nothing (P22).
    pub fn apply_delta(
        &mut self,
        first: bool,
        subscribe: &[String],
        unsubscribe: &[String],
    ) -> DeltaChange {
        // P35: xdstp names compare in canonical form (opaque names are not copied).
        if xdstp::any(subscribe) || xdstp::any(unsubscribe) {
            let (subscribe, unsubscribe) = (
                xdstp::canonical_all(subscribe),
                xdstp::canonical_all(unsubscribe),
            );
            return self.apply_delta_canonical(first, &subscribe, &unsubscribe);
        }
        self.apply_delta_canonical(first, subscribe, unsubscribe)
    }

    fn apply_delta_canonical(
        &mut self,
        first: bool,
        subscribe: &[String],
        unsubscribe: &[String],
    ) -> DeltaChange {
        let mut change = DeltaChange::default();
        let was_wildcard = self.wildcard;
        if first && subscribe.is_empty() {
            self.wildcard = true;
        }
        if !subscribe.is_empty() {
            self.named = true;
        }
        // The set may be shared with other streams (below): it is copied only when a name
        // comes or goes, not for every ACK or repeated name.
        let mut gained: Vec<&str> = Vec::new();
        let mut seen: HashSet<&str, foldhash::quality::RandomState> = HashSet::default();
        for name in subscribe {
            if name == WILDCARD {
                self.wildcard = true;
            } else if self.names.contains(name) || !seen.insert(name) {
                // Already subscribed: still sent again (P21).
                change.resubscribed.push(name.clone());
            } else {
                gained.push(name);
                change.subscribed.push(name.clone());
            }
        }
        let mut shared = false;
        if !gained.is_empty() {
            if unsubscribe.is_empty() && self.names.len() + gained.len() <= DELTA_SHARED_AT_MOST {
                // Shared at once, from a merge of the two sorted lists: no copy of the set is
                // made and dropped (a stream's first request names every resource it takes).
                gained.sort_unstable();
                let mut list = Vec::with_capacity(self.names.len() + gained.len());
                let mut old = self.names.iter().map(String::as_str).peekable();
                for name in gained {
                    while let Some(o) = old.next_if(|o| *o < name) {
                        list.push(o);
                    }
                    list.push(name);
                }
                list.extend(old);
                self.globs = list.iter().any(|n| xdstp::is_glob(n));
                self.names = NameSets::global().share(&list);
                shared = true;
            } else {
                let names = Arc::make_mut(&mut self.names);
                names.extend(gained.into_iter().map(str::to_string));
            }
        }
        for name in unsubscribe {
            if name == WILDCARD {
                self.wildcard = false;
            } else if self.names.contains(name) {
                Arc::make_mut(&mut self.names).remove(name);
                change.unsubscribed.push(name.clone());
            }
        }
        if !shared && (!change.subscribed.is_empty() || !change.unsubscribed.is_empty()) {
            self.globs = self.names.iter().any(|n| xdstp::is_glob(n));
            // A fleet's delta proxies of one kind subscribe to the same names too: share
            // the set as SotW's are. A large set is left the stream's own, so that a client
            // subscribing name by name (on demand) does not copy it at every step.
            if self.names.len() <= DELTA_SHARED_AT_MOST {
                let list: Vec<&str> = self.names.iter().map(String::as_str).collect();
                self.names = NameSets::global().share(&list);
            }
        }
        change.wildcard_added = self.wildcard && !was_wildcard;
        change.wildcard_dropped = was_wildcard && !self.wildcard;
        change
    }

    /// Whether the client takes every resource of the type (P14).
    pub fn is_wildcard(&self) -> bool {
        self.wildcard
    }

    /// Whether a name is an xdstp glob collection (P34), which covers its members.
    pub fn has_globs(&self) -> bool {
        self.globs
    }

    /// The explicitly named resources.
    pub fn names(&self) -> &BTreeSet<String> {
        &self.names
    }

    /// Whether this subscription covers `name`: by wildcard, by name, or by the glob
    /// collection it is a member of (P34).
    pub fn covers(&self, name: &str) -> bool {
        self.wildcard || self.names.contains(name) || self.covers_by_glob(name)
    }

    fn covers_by_glob(&self, name: &str) -> bool {
        self.globs && xdstp::collection_of(name).is_some_and(|c| self.names.contains(&c))
    }

    /// Whether this subscription covers `resource`: by wildcard, by name, by one of its
    /// aliases (P24), or by its VHDS namespace (Envoy subscribes to a route configuration's
    /// name to get its virtual hosts).
    pub fn covers_resource(&self, resource: &Resource) -> bool {
        self.wildcard
            || self.names.contains(&resource.name)
            || self.covers_by_glob(&resource.name)
            || resource.aliases.iter().any(|a| self.names.contains(a))
            || resource
                .namespace()
                .is_some_and(|ns| self.names.contains(ns))
    }

    /// For each of `resources` (in name order, each once), whether this subscription covers
    /// it ([`Subscription::covers_resource`]). Their names are merged with the subscription's
    /// when there are enough of them that a merge is cheaper than a lookup each (a push that
    /// changes every endpoint, on every stream).
    pub fn covers_sorted(&self, resources: &[&Resource]) -> Vec<bool> {
        if self.wildcard || !merge_is_cheaper(resources.len(), self.names.len()) {
            return resources.iter().map(|r| self.covers_resource(r)).collect();
        }
        let mut names = self.names.iter().peekable();
        resources
            .iter()
            .map(|r| {
                while names.next_if(|n| **n < r.name).is_some() {}
                names.peek().is_some_and(|n| **n == r.name) || self.covers_resource(r)
            })
            .collect()
    }

    /// What answers computed for this subscription are remembered by (selections, what a
    /// push's changes cover): its shared name set, or one set standing for every wildcard.
    fn shared_key(&self) -> &Arc<BTreeSet<String>> {
        if self.wildcard {
            everything()
        } else {
            &self.names
        }
    }

    /// What this subscription covers of a push's changed resources that exist
    /// (`changes.now`): [`Subscription::covers_sorted`] of them, and those covered as one
    /// list (with what they add to a response, and whether any has a TTL). Computed once per
    /// shared name set: every delta stream asks on every push, and a fleet's streams of one
    /// kind share their names.
    pub fn covers_changes(&self, changes: &Changes) -> Arc<Covered> {
        let key = self.shared_key();
        if let Some(found) = changes.covered.get(key) {
            return found;
        }
        let present: Vec<&Arc<Resource>> = changes.now.iter().flatten().collect();
        let borrowed: Vec<&Resource> = present.iter().map(|r| r.as_ref()).collect();
        let flags = self.covers_sorted(&borrowed);
        let resources: Arc<[Arc<Resource>]> = present
            .iter()
            .zip(&flags)
            .filter(|(_, covered)| **covered)
            .map(|(r, _)| Arc::clone(r))
            .collect();
        let covered = Arc::new(Covered {
            flags: flags.into(),
            listed: Listed::new(resources, super::response_cost),
        });
        changes.covered.put(key, Arc::clone(&covered));
        covered
    }

    /// The aliases of `resource` this subscription names: a response lists them beside the
    /// resource's name so the client can match it to what it asked for (P24).
    pub fn aliases_of(&self, resource: &Resource) -> Vec<String> {
        resource
            .aliases
            .iter()
            .filter(|a| self.names.contains(*a))
            .cloned()
            .collect()
    }

    /// The names this subscription names explicitly that `snapshot` has no resource of, in
    /// name order (P32). Linear, as [`Subscription::select`].
    pub fn missing(&self, snapshot: &TypeSnapshot) -> Vec<String> {
        let mut resources = snapshot.resources.keys().peekable();
        self.names
            .iter()
            .filter(|name| {
                while resources.next_if(|n| n < name).is_some() {}
                resources.peek() != Some(name)
            })
            // A glob collection may be empty; it is never "missing" (P34).
            .filter(|name| !(self.globs && xdstp::is_glob(name)))
            .cloned()
            .collect()
    }

    /// What this subscription selects of `snapshot`: the resources it covers, in name order,
    /// and the SotW version of that selection. Computed once per (snapshot, shared name set)
    /// and shared: the streams asking for the same names hold one `NameSets` set, so a push
    /// to 10,000 of them selects once. Linear in the sizes of the snapshot and the name set
    /// (a merge of two sorted sequences) when computed.
    pub fn select(&self, snapshot: &TypeSnapshot) -> Arc<Selection> {
        let key = self.shared_key();
        if let Some(found) = snapshot.selections.get(key) {
            return found;
        }
        let resources: Vec<Arc<Resource>> =
            self.select_from(snapshot).into_iter().cloned().collect();
        let version = if self.wildcard {
            snapshot.version.clone()
        } else {
            selection_version(resources.iter().map(Arc::as_ref))
        };
        let selection = Arc::new(Selection::new(resources, version));
        snapshot.selections.put(key, Arc::clone(&selection));
        selection
    }

    /// What [`Subscription::select`] takes of `snapshot`, borrowed from it and not
    /// remembered.
    pub(crate) fn select_from<'a>(&self, snapshot: &'a TypeSnapshot) -> Vec<&'a Arc<Resource>> {
        if self.wildcard {
            return snapshot.resources.values().collect();
        }
        let mut out = Vec::with_capacity(self.names.len().min(snapshot.resources.len()));
        let mut resources = snapshot.resources.iter().peekable();
        for name in self.names.iter() {
            while resources.next_if(|(n, _)| *n < name).is_some() {}
            if let Some((_, r)) = resources.next_if(|(n, _)| *n == name) {
                out.push(r);
            }
        }
        // P34: each glob collection's members, merged in name order.
        if self.globs {
            for glob in self.names.iter().filter(|n| xdstp::is_glob(n)) {
                out.extend(snapshot.members(glob));
            }
            out.sort_by(|a, b| a.name.cmp(&b.name));
            out.dedup_by(|a, b| a.name == b.name);
        }
        out
    }
}

/// The key under which a type snapshot remembers what a wildcard selects: a set no
/// subscription holds, alive for the whole process.
fn everything() -> &'static Arc<BTreeSet<String>> {
    static EVERYTHING: OnceLock<Arc<BTreeSet<String>>> = OnceLock::new();
    EVERYTHING.get_or_init(Arc::default)
}

/// The version of a named selection: from each resource's digest of its name and version
/// (computed once per resource), summed, and the count, so equal versions mean equal
/// content (short of a 64-bit collision), in every process, at the cost of an addition per
/// resource. Marked apart from type-wide versions (`n-`): a client that holds a type's
/// version from a server that sent those (or from before a rolling upgrade) has proved
/// nothing about which names it holds.
pub(crate) fn selection_version<'a>(selected: impl IntoIterator<Item = &'a Resource>) -> String {
    let (sum, count) = selected.into_iter().fold((0u64, 0usize), |(sum, n), r| {
        (sum.wrapping_add(r.selection_key()), n + 1)
    });
    format!("n-{sum:016x}-{count}")
}

/// The name sets of State-of-the-World subscriptions, shared between the streams that
/// subscribe to the same names: a fleet's proxies of one kind ask for the same endpoints and
/// routes, so 10,000 streams keep one copy of each set instead of 10,000. A set lives as
/// long as a stream holds it (the table keeps only weak references).
///
/// Delta subscriptions share theirs too, up to [`DELTA_SHARED_AT_MOST`] names: they change
/// by increments, and a change copies a shared set.
#[derive(Debug, Default)]
struct NameSets {
    /// By a hash of the names (seeded per process, so that clients cannot aim collisions).
    sets: HashMap<u64, Vec<Weak<BTreeSet<String>>>>,
    hasher: RandomState,
    /// Entries (live or dead) past which the table is swept of dead ones.
    sweep_at: usize,
}

/// The largest delta name set shared between streams ([`NameSets`]): a change to a shared
/// set copies it, so a larger one, changed name by name by an on-demand client, stays its
/// stream's own.
pub const DELTA_SHARED_AT_MOST: usize = 1024;

/// Below this many entries the table is never swept.
const MIN_SWEEP: usize = 1024;

impl NameSets {
    fn global() -> MutexGuard<'static, NameSets> {
        static SETS: OnceLock<Mutex<NameSets>> = OnceLock::new();
        SETS.get_or_init(Mutex::default)
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The shared set of `names` (sorted, without duplicates).
    fn share(&mut self, names: &[&str]) -> Arc<BTreeSet<String>> {
        let key = self.hasher.hash_one(names);
        let same = |set: &BTreeSet<String>| {
            set.len() == names.len() && set.iter().zip(names).all(|(a, b)| a == b)
        };
        let entry = self.sets.entry(key).or_default();
        entry.retain(|w| w.strong_count() > 0);
        if let Some(found) = entry.iter().filter_map(Weak::upgrade).find(|set| same(set)) {
            return found;
        }
        let set = Arc::new(names.iter().map(|n| n.to_string()).collect());
        entry.push(Arc::downgrade(&set));
        let entries = self.sets.len();
        if entries > self.sweep_at.max(MIN_SWEEP) {
            self.sets.retain(|_, sets| {
                sets.retain(|w| w.strong_count() > 0);
                !sets.is_empty()
            });
            self.sweep_at = 2 * self.sets.len();
        }
        set
    }
}

/// What one delta request changed in a subscription.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeltaChange {
    pub wildcard_added: bool,
    pub wildcard_dropped: bool,
    /// Names newly subscribed.
    pub subscribed: Vec<String>,
    /// Names subscribed again while already subscribed.
    pub resubscribed: Vec<String>,
    /// Names that were subscribed and no longer are (phantoms left out).
    pub unsubscribed: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn p15_p16_sotw_wildcard_sequence() {
        let mut s = Subscription::default();
        s.apply_sotw(&[]);
        assert!(s.is_wildcard(), "[] first is the legacy wildcard");
        s.apply_sotw(&names(&["*", "A"]));
        assert!(s.is_wildcard());
        assert_eq!(s.names().iter().collect::<Vec<_>>(), ["A"]);
        s.apply_sotw(&names(&["A"]));
        assert!(!s.is_wildcard());
        assert_eq!(s.names().len(), 1);
        s.apply_sotw(&[]);
        assert!(!s.is_wildcard(), "[] after a name is nothing, not wildcard");
        assert!(s.names().is_empty());
    }

    #[test]
    fn sotw_streams_asking_for_the_same_names_share_one_set() {
        let mut a = Subscription::default();
        let mut b = Subscription::default();
        a.apply_sotw(&names(&["shared-x", "shared-y"]));
        b.apply_sotw(&names(&["shared-y", "*", "shared-x", "shared-y"]));
        assert!(Arc::ptr_eq(&a.names, &b.names), "same names, one set");
        b.apply_sotw(&names(&["shared-y"]));
        assert!(!Arc::ptr_eq(&a.names, &b.names));
        assert_eq!(
            a.names().iter().collect::<Vec<_>>(),
            ["shared-x", "shared-y"]
        );
        assert_eq!(b.names().iter().collect::<Vec<_>>(), ["shared-y"]);
        // Once no stream holds a set, it is gone: a new one is built.
        let weak = Arc::downgrade(&a.names);
        drop(a);
        assert!(weak.upgrade().is_none());
        let mut c = Subscription::default();
        c.apply_sotw(&names(&["shared-x", "shared-y"]));
        assert_eq!(c.names().len(), 2);
    }

    #[test]
    fn delta_subscriptions_to_the_same_names_share_one_set_and_a_change_copies_it() {
        let (mut a, mut b) = (Subscription::default(), Subscription::default());
        a.apply_delta(true, &names(&["delta-x", "delta-y"]), &[]);
        b.apply_delta(true, &names(&["delta-y"]), &[]);
        b.apply_delta(false, &names(&["delta-x"]), &[]);
        assert!(Arc::ptr_eq(&a.names, &b.names), "the same names, one set");
        // P21: a name subscribed again changes nothing, and shares on.
        let change = b.apply_delta(false, &names(&["delta-x"]), &names(&["never"]));
        assert_eq!(change.resubscribed, ["delta-x"]);
        assert!(change.subscribed.is_empty() && change.unsubscribed.is_empty());
        assert!(Arc::ptr_eq(&a.names, &b.names));
        // P22: unsubscribing one stream's name leaves the other's set as it was.
        let change = b.apply_delta(false, &[], &names(&["delta-x"]));
        assert_eq!(change.unsubscribed, ["delta-x"]);
        assert_eq!(b.names().iter().collect::<Vec<_>>(), ["delta-y"]);
        assert_eq!(a.names().len(), 2);
        assert!(!Arc::ptr_eq(&a.names, &b.names));
        // A set over the bound is the stream's own.
        let many: Vec<String> = (0..=DELTA_SHARED_AT_MOST)
            .map(|i| format!("many-{i}"))
            .collect();
        let (mut c, mut d) = (Subscription::default(), Subscription::default());
        c.apply_delta(true, &many, &[]);
        d.apply_delta(true, &many, &[]);
        assert_eq!(c.names(), d.names());
        assert!(!Arc::ptr_eq(&c.names, &d.names));
    }

    #[test]
    fn p21_a_name_twice_in_one_request_is_subscribed_once_and_merged_into_the_shared_set() {
        let (mut a, mut b) = (Subscription::default(), Subscription::default());
        let change = a.apply_delta(
            true,
            &names(&["dup-c", "dup-a", "dup-c", "*", "dup-b"]),
            &[],
        );
        assert_eq!(
            change.subscribed,
            ["dup-c", "dup-a", "dup-b"],
            "in request order"
        );
        assert_eq!(change.resubscribed, ["dup-c"]);
        assert!(a.is_wildcard() && change.wildcard_added);
        // The same names in another order and in two steps: the one shared set, sorted.
        b.apply_delta(true, &names(&["dup-b", "*"]), &[]);
        let change = b.apply_delta(false, &names(&["dup-c", "dup-a", "dup-b"]), &[]);
        assert_eq!(change.subscribed, ["dup-c", "dup-a"]);
        assert_eq!(change.resubscribed, ["dup-b"]);
        assert_eq!(
            b.names().iter().collect::<Vec<_>>(),
            ["dup-a", "dup-b", "dup-c"]
        );
        assert!(Arc::ptr_eq(&a.names, &b.names));
        // A glob gained this way is seen as one (P34).
        b.apply_delta(false, &names(&["xdstp://auth/t/dup/*"]), &[]);
        assert!(b.covers("xdstp://auth/t/dup/member"));
    }

    #[test]
    fn the_shared_name_table_is_swept_of_sets_no_stream_holds() {
        let mut sets = NameSets::default();
        let kept = sets.share(&["kept"]);
        for i in 0..(3 * MIN_SWEEP) {
            let name = format!("gone-{i}");
            drop(sets.share(&[name.as_str()]));
        }
        assert!(
            sets.sets.len() <= MIN_SWEEP + 1,
            "{} entries",
            sets.sets.len()
        );
        assert!(Arc::ptr_eq(&kept, &sets.share(&["kept"])));
    }

    #[test]
    fn select_merges_names_with_the_snapshot() {
        use crate::cache::Snapshot;
        use crate::resource::ResourceType;
        let items: Vec<_> = ["a", "c", "d", "f"]
            .iter()
            .map(|n| Arc::new(Resource::new(ResourceType::Endpoint, *n, "1", vec![], None)))
            .collect();
        let snap = Snapshot::from_resources(&items);
        let eds = snap.get(ResourceType::Endpoint);
        let mut s = Subscription::default();
        s.apply_sotw(&names(&["b", "c", "f", "z", "a"]));
        let selected = s.select(eds);
        let got: Vec<_> = selected.resources.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(got, ["a", "c", "f"]);
        assert!(selected.version.starts_with("n-") && selected.version.ends_with("-3"));
        s.apply_sotw(&names(&["*", "zz"]));
        assert_eq!(s.select(eds).resources.len(), 4);
        assert_eq!(s.select(eds).version, eds.version, "a wildcard: the type's");
        s.apply_sotw(&names(&["zz"]));
        assert!(s.select(eds).resources.is_empty());
    }

    /// A snapshot of these ClusterLoadAssignments, each at `version`.
    fn endpoints(names: &[&str], version: &str) -> crate::cache::Snapshot {
        use crate::resource::ResourceType;
        let items: Vec<_> = names
            .iter()
            .map(|n| {
                Arc::new(Resource::new(
                    ResourceType::Endpoint,
                    *n,
                    version,
                    vec![],
                    None,
                ))
            })
            .collect();
        crate::cache::Snapshot::from_resources(&items)
    }

    #[test]
    fn streams_asking_for_the_same_names_share_one_selection_per_snapshot() {
        use crate::resource::ResourceType;
        let make = |version: &str| endpoints(&["sel-a", "sel-b", "sel-c"], version);
        let (one, two) = (make("1"), make("2"));
        let (eds1, eds2) = (
            one.get(ResourceType::Endpoint),
            two.get(ResourceType::Endpoint),
        );
        let mut a = Subscription::default();
        let mut b = Subscription::default();
        a.apply_sotw(&names(&["sel-a", "sel-c"]));
        b.apply_sotw(&names(&["sel-c", "sel-a"]));
        let first = a.select(eds1);
        assert!(
            Arc::ptr_eq(&first, &b.select(eds1)),
            "one selection for both"
        );
        let later = a.select(eds2);
        assert!(
            !Arc::ptr_eq(&first, &later),
            "another snapshot, another selection"
        );
        assert_ne!(first.version, later.version, "their versions differ");
        assert_eq!(later.resources[0].version, "2");
        // Other names: another selection, of the same snapshot.
        b.apply_sotw(&names(&["sel-b"]));
        let other = b.select(eds1);
        assert_eq!(other.resources.len(), 1);
        assert_eq!(other.resources[0].name, "sel-b");
        assert!(Arc::ptr_eq(&first, &a.select(eds1)), "still remembered");
        // What a client holding the first lacks of the later one: all three changed.
        let lacking: Vec<_> = later
            .lacking_since(&first)
            .iter()
            .map(|r| r.name.clone())
            .collect();
        assert_eq!(lacking, ["sel-a", "sel-c"]);
        assert!(
            later.lacking_since(&later).is_empty(),
            "nothing, against itself"
        );
        // A wildcard selects everything, whatever names it also has.
        let mut w = Subscription::default();
        w.apply_sotw(&[]);
        assert_eq!(w.select(eds1).resources.len(), 3);
        assert_eq!(w.select(eds1).version, eds1.version);
        assert!(Arc::ptr_eq(&w.select(eds1), &w.select(eds1)));
    }

    /// P8, P9: what a client holding one selection lacks of another: what is new to it or
    /// changed, never what it has at the same version, nor what it no longer asks for.
    #[test]
    fn what_a_selection_lacks_since_another_is_what_is_new_or_changed() {
        use crate::cache::Snapshot;
        use crate::resource::ResourceType;
        let make = |items: &[(&str, &str)]| {
            let items: Vec<_> = items
                .iter()
                .map(|(n, v)| Arc::new(Resource::new(ResourceType::Endpoint, *n, *v, vec![], None)))
                .collect();
            Snapshot::from_resources(&items)
        };
        let old = make(&[("lk-a", "1"), ("lk-b", "1"), ("lk-c", "1"), ("lk-d", "1")]);
        let new = make(&[("lk-a", "1"), ("lk-b", "2"), ("lk-d", "1"), ("lk-e", "1")]);
        let mut s = Subscription::default();
        s.apply_sotw(&names(&["lk-a", "lk-b", "lk-c", "lk-d", "lk-e"]));
        let before = s.select(old.get(ResourceType::Endpoint));
        let after = s.select(new.get(ResourceType::Endpoint));
        let lacking = |a: &Selection, b: &Arc<Selection>| -> Vec<String> {
            a.lacking_since(b).iter().map(|r| r.name.clone()).collect()
        };
        // b changed, e is new; a and d are the same (other `Arc`s), c is gone.
        assert_eq!(lacking(&after, &before), ["lk-b", "lk-e"]);
        assert_eq!(
            lacking(&after, &before),
            ["lk-b", "lk-e"],
            "remembered, the same"
        );
        assert_eq!(lacking(&before, &after), ["lk-b", "lk-c"]);
        let none = s.select(make(&[]).get(ResourceType::Endpoint));
        assert_eq!(lacking(&after, &none).len(), 4, "from nothing: everything");
        assert!(lacking(&none, &after).is_empty());
    }

    #[test]
    fn p19_what_a_pushs_changes_cover_is_computed_once_per_shared_name_set() {
        use crate::resource::ResourceType;
        let snap = |version: &str| {
            endpoints(&["ch-a", "ch-b", "ch-c", "ch-d"], version)
                .get(ResourceType::Endpoint)
                .clone()
        };
        let (old, new) = (snap("1"), snap("2"));
        let changes = new.changed_since(&old);
        assert_eq!(changes.names.len(), 4);
        let (mut a, mut b, mut c, mut w) = Default::default();
        for (s, names) in [
            (&mut a, &["ch-a", "ch-c"][..]),
            (&mut b, &["ch-c", "ch-a"][..]),
            (&mut c, &["ch-b"][..]),
        ] {
            Subscription::apply_delta(
                s,
                true,
                &names.iter().map(|n| n.to_string()).collect::<Vec<_>>(),
                &[],
            );
        }
        Subscription::apply_delta(&mut w, true, &[], &[]);
        let (ca, cb, cc, cw) = (
            a.covers_changes(&changes),
            b.covers_changes(&changes),
            c.covers_changes(&changes),
            w.covers_changes(&changes),
        );
        assert_eq!(&ca.flags[..], [true, false, true, false]);
        assert!(Arc::ptr_eq(&ca, &cb), "the same names: asked once");
        assert_eq!(&cc.flags[..], [false, true, false, false]);
        assert_eq!(&cw.flags[..], [true; 4], "a wildcard covers every one");
        // Each is what covering each resource says.
        for (s, got) in [(&a, &ca), (&c, &cc), (&w, &cw)] {
            let want: Vec<bool> = changes
                .now
                .iter()
                .flatten()
                .map(|r| s.covers_resource(r))
                .collect();
            assert_eq!(&got.flags[..], &want[..]);
            // The list of those covered, as they are in the changes.
            let listed: Vec<&str> = got
                .listed
                .resources
                .iter()
                .map(|r| r.name.as_str())
                .collect();
            let covered: Vec<&str> = changes
                .now
                .iter()
                .flatten()
                .filter(|r| s.covers_resource(r))
                .map(|r| r.name.as_str())
                .collect();
            assert_eq!(listed, covered);
        }
    }

    /// P14, P24, P34: whether a subscription covers each of many resources, by a merge of
    /// the names or by a lookup each, is what it says of each alone: by name, by alias, by
    /// glob collection, by wildcard.
    #[test]
    fn covering_sorted_resources_is_covering_each() {
        use crate::resource::ResourceType;
        let endpoint = |name: &str| Resource::new(ResourceType::Endpoint, name, "1", vec![], None);
        let glob = "xdstp://auth/envoy.config.endpoint.v3.ClusterLoadAssignment/cov/*";
        let member = "xdstp://auth/envoy.config.endpoint.v3.ClusterLoadAssignment/cov/m1";
        let mut aliased = endpoint("cov-aliased");
        aliased.aliases = vec!["cov-alias".into()];
        let mut resources: Vec<Resource> = (0..40)
            .map(|i| endpoint(&format!("cov-{i:02}")))
            .chain([aliased, endpoint(member)])
            .collect();
        resources.sort_by(|a, b| a.name.cmp(&b.name));
        let all: Vec<&Resource> = resources.iter().collect();
        let check = |s: &Subscription, of: &[&Resource]| {
            let want: Vec<bool> = of.iter().map(|r| s.covers_resource(r)).collect();
            assert_eq!(s.covers_sorted(of), want);
            want.iter().filter(|c| **c).count()
        };
        let mut s = Subscription::default();
        let mut named: Vec<String> = (0..40).step_by(3).map(|i| format!("cov-{i:02}")).collect();
        named.extend([
            "cov-alias".to_string(),
            glob.to_string(),
            "cov-zz".to_string(),
        ]);
        s.apply_delta(false, &named, &[]);
        assert!(merge_is_cheaper(all.len(), s.names().len()));
        assert_eq!(
            check(&s, &all),
            14 + 1 + 1,
            "every third, the alias, the member"
        );
        assert!(!merge_is_cheaper(2, s.names().len()));
        assert_eq!(check(&s, &all[..2]), 1, "a lookup each");
        let mut w = Subscription::default();
        w.apply_delta(true, &[], &[]);
        assert_eq!(check(&w, &all), all.len(), "a wildcard covers everything");
    }

    #[test]
    fn p16_delta_wildcard_sequence() {
        let mut s = Subscription::default();
        let c = s.apply_delta(true, &[], &[]);
        assert!(
            s.is_wildcard() && c.wildcard_added,
            "subscribe [] first: legacy wildcard"
        );
        s.apply_delta(false, &names(&["A"]), &[]);
        assert!(s.is_wildcard(), "subscribe [A]: wildcard plus A");
        assert!(s.covers("A") && s.covers("B"));
        let c = s.apply_delta(false, &[], &names(&["*"]));
        assert!(
            !s.is_wildcard() && c.wildcard_dropped,
            "unsubscribe [*]: A only"
        );
        assert!(s.covers("A") && !s.covers("B"));
        let c = s.apply_delta(false, &[], &names(&["A"]));
        assert_eq!(c.unsubscribed, ["A"]);
        assert!(!s.covers("A"), "unsubscribe [A]: nothing");
        // P15: an empty later request is not a wildcard again.
        s.apply_delta(false, &[], &[]);
        assert!(!s.is_wildcard());
    }

    #[test]
    fn p22_phantom_unsubscribes_change_nothing() {
        let mut s = Subscription::default();
        s.apply_delta(true, &names(&["A"]), &[]);
        let c = s.apply_delta(false, &[], &names(&["never", "B"]));
        assert_eq!(c, DeltaChange::default());
        assert!(s.covers("A") && !s.is_wildcard());
        let c = s.apply_delta(false, &names(&["A"]), &[]);
        assert_eq!(c.resubscribed, ["A"], "P21: a repeated name is noted");
    }

    #[test]
    fn p24_covers_by_alias_and_namespace() {
        use crate::resource::ResourceType;
        let vh = Resource::new(ResourceType::VirtualHost, "rc/shop", "1", vec![], None)
            .with_aliases(names(&["rc/shop.example.com", "rc/www.shop.example.com"]));
        let mut s = Subscription::default();
        s.apply_delta(true, &names(&["rc/shop.example.com"]), &[]);
        assert!(s.covers_resource(&vh));
        assert_eq!(s.aliases_of(&vh), ["rc/shop.example.com"]);
        let mut ns = Subscription::default();
        ns.apply_delta(true, &names(&["rc"]), &[]);
        assert!(ns.covers_resource(&vh));
        assert!(ns.aliases_of(&vh).is_empty());
        let mut other = Subscription::default();
        other.apply_delta(true, &names(&["rc/blog.example.com"]), &[]);
        assert!(!other.covers_resource(&vh));
    }

    #[test]
    fn p15_explicit_star_first_then_empty_is_nothing() {
        let mut s = Subscription::default();
        s.apply_sotw(&names(&["*"]));
        assert!(s.is_wildcard());
        s.apply_sotw(&[]);
        assert!(!s.is_wildcard());
    }
}
