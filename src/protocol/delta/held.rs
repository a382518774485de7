//! What a delta client holds of one type, as far as the server knows: name -> version.
//!
//! Owns: the map and how it is stored. A resource sent is kept as the snapshot's own
//! `Arc<Resource>` (8 bytes a name, sharing its name instead of copying it: every stream holds
//! every resource of the types it takes, about 220 on the reference snapshot); a name the
//! client only claimed on reconnecting (P23) is kept apart with its version, as there are none
//! once each is confirmed or sent. Must not: decide what to send.

use std::borrow::Borrow;
use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::Arc;

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
/// docs/benchmarks.md, "Issue 22").
#[derive(Debug, Default)]
pub(super) struct HeldSet {
    sent: HashSet<Sent, foldhash::quality::RandomState>,
    claimed: HashMap<String, String, foldhash::quality::RandomState>,
}

impl HeldSet {
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

    pub fn contains(&self, name: &str) -> bool {
        self.get(name).is_some()
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
        assert!(set.take("b").is_some() && !set.contains("b"));
        assert!(!set.remove("b"));
        set.replace(claimed("c", "1"));
        set.retain(|h| h.name() != "c");
        assert_eq!(versions(&set), [("a".into(), "3".into())]);
    }
}
