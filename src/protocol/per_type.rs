//! Per-type state of a stream, kept only for the types its client asked for.
//!
//! Owns: the slots, one per [`ResourceType`], each empty until first written. A stream has
//! a slot for each of the ten types and a client asks for about four; kept inline, the
//! unused six were a third of every stream's task (docs/benchmarks.md, "Memory per proxy, against the floor").
//! Reading an empty slot gives the type's empty state ([`Empty::empty`]); writing one
//! creates it. Must not: know what the state is.

use std::ops::{Index, IndexMut};

use crate::resource::ResourceType;

/// A type's state as it is before anything happened to it, shared by every empty slot.
pub(crate) trait Empty: Default + 'static {
    fn empty() -> &'static Self;
}

/// Implements [`Empty`] for a state that is `Default + Sync`, with one shared value.
macro_rules! empty {
    ($t:ty) => {
        impl $crate::protocol::per_type::Empty for $t {
            fn empty() -> &'static Self {
                static EMPTY: std::sync::LazyLock<$t> = std::sync::LazyLock::new(<$t>::default);
                &EMPTY
            }
        }
    };
}
pub(crate) use empty;

/// One slot per type; see the module doc.
#[derive(Debug)]
pub(crate) struct PerType<T> {
    slots: [Option<Box<T>>; ResourceType::ALL.len()],
}

impl<T> Default for PerType<T> {
    fn default() -> Self {
        PerType {
            slots: Default::default(),
        }
    }
}

impl<T> PerType<T> {
    /// The state of `kind`, if anything was written to it.
    pub fn get(&self, kind: ResourceType) -> Option<&T> {
        self.slots[kind.index()].as_deref()
    }

    /// The state of `kind` to change, if anything was written to it (without creating it).
    pub fn get_mut(&mut self, kind: ResourceType) -> Option<&mut T> {
        self.slots[kind.index()].as_deref_mut()
    }

    /// The states written to, in [`ResourceType::ALL`] order.
    pub fn iter(&self) -> impl Iterator<Item = &T> {
        self.slots.iter().filter_map(|s| s.as_deref())
    }
}

impl<T: Empty> Index<ResourceType> for PerType<T> {
    type Output = T;

    fn index(&self, kind: ResourceType) -> &T {
        match self.get(kind) {
            Some(state) => state,
            None => T::empty(),
        }
    }
}

/// Writing creates the slot: take `&mut` only of a type the client asked for.
impl<T: Empty> IndexMut<ResourceType> for PerType<T> {
    fn index_mut(&mut self, kind: ResourceType) -> &mut T {
        self.slots[kind.index()].get_or_insert_with(Box::default)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Default, PartialEq)]
    struct Counter(u32);
    empty!(Counter);

    #[test]
    fn a_slot_reads_empty_until_written_and_only_written_slots_are_kept() {
        let mut types: PerType<Counter> = PerType::default();
        assert_eq!(types[ResourceType::Cluster], Counter(0));
        assert!(
            types.get(ResourceType::Cluster).is_none(),
            "reading creates nothing"
        );
        assert!(types.get_mut(ResourceType::Cluster).is_none());
        types[ResourceType::Endpoint].0 += 2;
        types[ResourceType::Cluster].0 += 1;
        assert_eq!(types[ResourceType::Endpoint], Counter(2));
        assert_eq!(
            types.iter().map(|c| c.0).collect::<Vec<_>>(),
            [1, 2],
            "in type order"
        );
        assert!(types.get(ResourceType::Listener).is_none());
        assert_eq!(Counter::empty(), &Counter(0));
    }
}
