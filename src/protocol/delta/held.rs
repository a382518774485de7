//! What a delta client holds of one type, as far as the server knows: name -> version.
//!
//! Owns: the map and how it is stored. A resource sent is kept as the snapshot's own
//! `Arc<Resource>` (8 bytes a name, sharing its name instead of copying it: every stream holds
//! every resource of the types it takes, about 220 on the reference snapshot); a name the
//! client only claimed on reconnecting (P23) is kept apart with its version, as there are none
//! once each is confirmed or sent. A stream that holds exactly what its subscription
//! covers of its type's snapshot keeps only that snapshot ([`Holding`]'s given form): every
//! stream of a fleet does between pushes, and a push then needs no lookup per name in what
//! each stream holds (docs/benchmarks.md, "Memory per proxy, against the floor"). Must not: decide what to
//! send.

use std::borrow::Borrow;
use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use super::super::Subscription;
use crate::cache::TypeSnapshot;
use crate::resource::Resource;

/// What the client holds of one name, owned: what [`HeldSet::replace`] takes and gives back.
#[derive(Clone, Debug)]
pub(super) enum Held {
    /// Sent on this stream.
    Sent(Arc<Resource>),
    /// Listed in `initial_resource_versions` (P23): name and version.
    Claimed(Box<(String, String)>),
}

impl Held {
    pub fn name(&self) -> &str {
        match self {
            Held::Sent(r) => &r.name,
            Held::Claimed(c) => &c.0,
        }
    }
}

/// What the client holds of one name, borrowed from the set.
#[derive(Clone, Copy, Debug)]
pub(super) enum HeldRef<'a> {
    Sent(&'a Arc<Resource>),
    Claimed { name: &'a str, version: &'a str },
}

impl<'a> HeldRef<'a> {
    pub fn name(self) -> &'a str {
        match self {
            HeldRef::Sent(r) => &r.name,
            HeldRef::Claimed { name, .. } => name,
        }
    }

    pub fn version(self) -> &'a str {
        match self {
            HeldRef::Sent(r) => &r.version,
            HeldRef::Claimed { version, .. } => version,
        }
    }
}

/// What the client held of one name before a response changed it.
#[derive(Debug)]
pub(super) enum Before {
    /// Nothing: the response added this resource (the common case, so no name is copied).
    Nothing(Arc<Resource>),
    /// This.
    Held(Held),
    /// This, and the response removed it.
    Released(Held),
}

/// What a client holds of one type, as far as the server knows: name by name (`set`), or
/// exactly the resources of a snapshot that the stream's subscription covers, each at the
/// snapshot's version (`given`, with `set` empty).
///
/// The given form is kept only while the subscription does not change (a change makes it
/// name by name first), and not for virtual hosts, whose aliases make what a subscription
/// covers depend on the resource as well as its name: for every other type, what
/// [`Subscription::select`] takes of a snapshot is what the subscription covers of it.
#[derive(Debug, Default)]
pub(super) struct Holding {
    set: HeldSet,
    given: Option<Given>,
}

#[derive(Debug)]
struct Given {
    snapshot: Arc<TypeSnapshot>,
    /// What the response in flight changed, if it was sent from the given form.
    before: Option<Box<GivenBefore>>,
}

/// What a response sent from the given form changed: the resources covered that differ
/// between the snapshot given before it and the one given now, and those it sent again
/// unchanged (P28).
#[derive(Debug)]
pub(super) struct GivenBefore {
    pub snapshot: Arc<TypeSnapshot>,
    /// In name order (perhaps a list shared with other streams).
    pub resent: Option<Arc<[Arc<Resource>]>>,
}

impl Holding {
    /// The snapshot whose covered resources are held, if that is the form.
    pub fn given(&self) -> Option<&Arc<TypeSnapshot>> {
        self.given.as_ref().map(|g| &g.snapshot)
    }

    /// Hold what the subscription covers of `snapshot`, after a response sent from the
    /// given form (`before`; `None`: held so already, nothing in flight).
    pub fn give(&mut self, snapshot: &Arc<TypeSnapshot>, before: Option<Box<GivenBefore>>) {
        self.set = HeldSet::default();
        self.given = Some(Given {
            snapshot: Arc::clone(snapshot),
            before,
        });
    }

    /// The names held, if held name by name.
    pub fn by_name(&self) -> Option<&HeldSet> {
        self.given.is_none().then_some(&self.set)
    }

    /// What is held of `name`, with `subscription` the stream's.
    pub fn get<'a>(&'a self, subscription: &Subscription, name: &str) -> Option<HeldRef<'a>> {
        match &self.given {
            None => self.set.get(name),
            Some(given) => given
                .snapshot
                .resources
                .get(name)
                .filter(|r| subscription.covers_resource(r))
                .map(HeldRef::Sent),
        }
    }

    pub fn contains(&self, subscription: &Subscription, name: &str) -> bool {
        self.get(subscription, name).is_some()
    }

    /// Every name held, in no particular order.
    pub fn iter<'a>(&'a self, subscription: &Subscription) -> Vec<HeldRef<'a>> {
        match &self.given {
            None => self.set.iter().collect(),
            Some(given) => subscription
                .select_from(&given.snapshot)
                .into_iter()
                .map(HeldRef::Sent)
                .collect(),
        }
    }

    /// The response in flight was answered: nothing of it is to restore any more.
    pub fn settle(&mut self) {
        if let Some(given) = &mut self.given {
            given.before = None;
        }
    }

    /// Name by name from here on, with `subscription` the stream's (unchanged since the
    /// snapshot was given); and, if the response in flight was sent from the given form,
    /// what the client held before it of each name it changed, to restore on a NACK.
    pub fn names(&mut self, subscription: &Subscription) -> (&mut HeldSet, Option<Vec<Before>>) {
        let mut undo = None;
        if let Some(given) = self.given.take() {
            let held = subscription.select(&given.snapshot);
            self.set = HeldSet::sent(held.resources.iter().cloned());
            undo = given
                .before
                .map(|before| given_before(&before, &given.snapshot, subscription));
        }
        (&mut self.set, undo)
    }
}

/// What a client holding what `subscription` covers of `before.snapshot` held, of each
/// name a response that brought it to `after` changed or sent again: what that response
/// recorded, had it been sent name by name.
fn given_before(
    before: &GivenBefore,
    after: &Arc<TypeSnapshot>,
    subscription: &Subscription,
) -> Vec<Before> {
    let was_held = |name: &str| {
        before
            .snapshot
            .resources
            .get(name)
            .filter(|r| subscription.covers_resource(r))
    };
    let changes = after.changed_since(&before.snapshot);
    let mut undo: Vec<Before> = changes
        .names
        .iter()
        .zip(changes.now.iter())
        .filter_map(|(name, now)| {
            let now = now.as_ref().filter(|r| subscription.covers_resource(r));
            match (was_held(name), now) {
                (Some(was), None) => Some(Before::Released(Held::Sent(Arc::clone(was)))),
                (Some(was), Some(_)) => Some(Before::Held(Held::Sent(Arc::clone(was)))),
                (None, Some(now)) => Some(Before::Nothing(Arc::clone(now))),
                (None, None) => None,
            }
        })
        .collect();
    // Sent again unchanged: the client had them at the same version.
    let resent = before
        .resent
        .iter()
        .flat_map(|resent| resent.iter())
        .filter(|r| changes.names.binary_search(&r.name).is_err())
        .filter_map(|r| was_held(&r.name))
        .map(|was| Before::Held(Held::Sent(Arc::clone(was))));
    undo.extend(resent);
    undo
}

/// A resource sent, in the set by its name.
#[derive(Debug)]
struct Sent(Arc<Resource>);

impl Borrow<str> for Sent {
    fn borrow(&self) -> &str {
        &self.0.name
    }
}

impl Hash for Sent {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.0.name.hash(state)
    }
}

impl PartialEq for Sent {
    fn eq(&self, other: &Sent) -> bool {
        self.0.name == other.0.name
    }
}

impl Eq for Sent {}

/// Name -> what the client holds; each name in one of the two maps at most. Hashed with
/// foldhash, keyed per map: every push looks up each changed name here on every stream,
/// and SipHash was about 6% of a delta push's stream instructions (callgrind,
/// docs/benchmarks.md, "Memory per proxy, against the floor").
#[derive(Debug, Default)]
pub(super) struct HeldSet {
    sent: HashSet<Sent, foldhash::quality::RandomState>,
    claimed: HashMap<String, String, foldhash::quality::RandomState>,
}

impl HeldSet {
    /// A set of these resources, sent.
    fn sent(resources: impl Iterator<Item = Arc<Resource>>) -> HeldSet {
        let mut set = HeldSet::default();
        set.sent.extend(resources.map(Sent));
        set
    }

    /// How many names are held.
    pub fn len(&self) -> usize {
        self.sent.len() + self.claimed.len()
    }

    /// Whether any name is held only by the client's claim (P23).
    pub fn has_claims(&self) -> bool {
        !self.claimed.is_empty()
    }

    pub fn get(&self, name: &str) -> Option<HeldRef<'_>> {
        if let Some(sent) = self.sent.get(name) {
            return Some(HeldRef::Sent(&sent.0));
        }
        if self.claimed.is_empty() {
            return None;
        }
        let (name, version) = self.claimed.get_key_value(name)?;
        Some(HeldRef::Claimed { name, version })
    }

    /// Hold `held` instead of what was held of its name, which is returned.
    pub fn replace(&mut self, held: Held) -> Option<Held> {
        let claimed = self.take_claimed(held.name());
        match held {
            Held::Sent(r) => {
                let sent = self.sent.replace(Sent(r)).map(|s| Held::Sent(s.0));
                sent.or(claimed)
            }
            Held::Claimed(c) => {
                let sent = self.sent.take(c.0.as_str()).map(|s| Held::Sent(s.0));
                let (name, version) = *c;
                self.claimed.insert(name, version);
                sent.or(claimed)
            }
        }
    }

    fn take_claimed(&mut self, name: &str) -> Option<Held> {
        if self.claimed.is_empty() {
            return None;
        }
        let (name, version) = self.claimed.remove_entry(name)?;
        Some(Held::Claimed(Box::new((name, version))))
    }

    /// No longer hold `name`; what was held of it.
    pub fn take(&mut self, name: &str) -> Option<Held> {
        match self.sent.take(name) {
            Some(sent) => Some(Held::Sent(sent.0)),
            None => self.take_claimed(name),
        }
    }

    pub fn remove(&mut self, name: &str) -> bool {
        self.take(name).is_some()
    }

    pub fn retain(&mut self, mut keep: impl FnMut(HeldRef<'_>) -> bool) {
        self.sent.retain(|s| keep(HeldRef::Sent(&s.0)));
        self.claimed
            .retain(|name, version| keep(HeldRef::Claimed { name, version }));
    }

    /// Every name held, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = HeldRef<'_>> {
        let sent = self.sent.iter().map(|s| HeldRef::Sent(&s.0));
        let claimed = self
            .claimed
            .iter()
            .map(|(name, version)| HeldRef::Claimed { name, version });
        sent.chain(claimed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resource::ResourceType;

    fn sent(name: &str, version: &str) -> Arc<Resource> {
        Arc::new(Resource::new(
            ResourceType::Cluster,
            name,
            version,
            vec![],
            None,
        ))
    }

    fn claimed(name: &str, version: &str) -> Held {
        Held::Claimed(Box::new((name.to_string(), version.to_string())))
    }

    fn versions(set: &HeldSet) -> Vec<(String, String)> {
        let mut all: Vec<_> = set
            .iter()
            .map(|h| (h.name().to_string(), h.version().to_string()))
            .collect();
        all.sort();
        all
    }

    #[test]
    fn p23_a_name_is_held_once_claimed_or_sent_and_replacing_gives_back_what_was_held() {
        let mut set = HeldSet::default();
        assert!(set.replace(claimed("a", "1")).is_none());
        assert!(set.replace(Held::Sent(sent("b", "1"))).is_none());
        assert!(matches!(
            set.get("a"),
            Some(HeldRef::Claimed { version: "1", .. })
        ));
        // Sent over a claim: the claim is given back, and the name is held once.
        let old = set.replace(Held::Sent(sent("a", "2")));
        assert!(matches!(&old, Some(Held::Claimed(c)) if c.1 == "1"));
        assert_eq!(
            versions(&set),
            [("a".into(), "2".into()), ("b".into(), "1".into())]
        );
        // A claim over a resource sent (a NACK's restore): the resource is given back.
        let old = set.replace(claimed("b", "0"));
        assert!(matches!(&old, Some(Held::Sent(r)) if r.version == "1"));
        assert_eq!(set.get("b").map(HeldRef::version), Some("0"));
        assert_eq!(set.iter().count(), 2);
        // Sent over sent.
        let old = set.replace(Held::Sent(sent("a", "3")));
        assert!(matches!(&old, Some(Held::Sent(r)) if r.version == "2"));
        assert!(set.take("b").is_some() && set.get("b").is_none());
        assert!(!set.remove("b"));
        set.replace(claimed("c", "1"));
        set.retain(|h| h.name() != "c");
        assert_eq!(versions(&set), [("a".into(), "3".into())]);
    }
}
