//! What a client subscribes to, for one type on one stream: names and the wildcard.

use std::collections::BTreeSet;
use std::sync::Arc;

use crate::cache::TypeSnapshot;
use crate::resource::Resource;

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
}

impl Subscription {
    /// Apply a State-of-the-World request's `resource_names`, which replace the set (P7).
    /// P15/P16: `[]` before any name means wildcard (legacy); `[*, A]` is wildcard plus A;
    /// `[A]` is A alone; `[]` after names means nothing.
    pub fn apply_sotw(&mut self, resource_names: &[String]) {
        if resource_names.is_empty() {
            self.wildcard = !self.named;
            self.names = Arc::default();
            return;
        }
        self.named = true;
        self.wildcard = resource_names.iter().any(|n| n == WILDCARD);
        self.names = Arc::new(
            resource_names
                .iter()
                .filter(|n| *n != WILDCARD)
                .cloned()
                .collect(),
        );
    }

    /// Whether the client takes every resource of the type (P14).
    pub fn is_wildcard(&self) -> bool {
        self.wildcard
    }

    /// The explicitly named resources.
    pub fn names(&self) -> &BTreeSet<String> {
        &self.names
    }

    /// Whether this subscription covers `name`.
    pub fn covers(&self, name: &str) -> bool {
        self.wildcard || self.names.contains(name)
    }

    /// The resources of `snapshot` this subscription covers, in name order. Linear in the
    /// sizes of the snapshot and the name set (a merge of two sorted sequences).
    pub fn select<'a>(&self, snapshot: &'a TypeSnapshot) -> Vec<&'a Arc<Resource>> {
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
        out
    }
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
        let got: Vec<_> = s.select(eds).iter().map(|r| r.name.as_str()).collect();
        assert_eq!(got, ["a", "c", "f"]);
        s.apply_sotw(&names(&["*", "zz"]));
        assert_eq!(s.select(eds).len(), 4);
        s.apply_sotw(&names(&["zz"]));
        assert!(s.select(eds).is_empty());
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
