//! What changed between two type snapshots (`changes_since`, against a model), and
//! resolving a name (aliases, VHDS namespaces).

use super::super::*;

fn snap(items: &[(&str, &str)]) -> Arc<TypeSnapshot> {
    Arc::new(TypeSnapshot::new(
        items
            .iter()
            .map(|(n, v)| {
                let r = Resource::new(ResourceType::Cluster, *n, *v, vec![], None);
                (n.to_string(), Arc::new(r))
            })
            .collect(),
    ))
}

#[test]
fn changes_since_lists_added_changed_and_removed_and_is_shared() {
    let old = snap(&[("a", "1"), ("b", "1"), ("c", "1"), ("e", "1")]);
    let new = snap(&[("a", "1"), ("b", "2"), ("d", "1"), ("e", "1")]);
    let changes = new.changes_since(&old);
    assert_eq!(&changes[..], ["b", "c", "d"]);
    // The second stream to ask gets the same answer without recomputing it.
    assert!(Arc::ptr_eq(&changes, &new.changes_since(&old)));
    let with = new.changed_since(&old);
    assert!(Arc::ptr_eq(&with.names, &changes));
    let now: Vec<_> = with
        .now
        .iter()
        .map(|r| r.as_ref().map(|r| r.name.as_str()))
        .collect();
    assert_eq!(now.len(), changes.len());
    for (name, now) in changes.iter().zip(&now) {
        // What the newer snapshot has of each changed name, or nothing: removed.
        assert_eq!(*now, new.resources.get(name).map(|r| r.name.as_str()));
    }
    assert!(new.changes_since(&new).is_empty());
    assert_eq!(&old.changes_since(&new)[..], ["b", "c", "d"]);
    assert_eq!(&snap(&[]).changes_since(&old)[..], ["a", "b", "c", "e"]);
}

#[test]
fn changes_since_matches_a_model_on_random_snapshots() {
    crate::testing::on_tapes(300, |next| {
        let mut make = || {
            let items: Vec<(String, String)> = (0..next(8))
                .map(|_| (format!("r{}", next(10)), format!("{}", next(3))))
                .collect();
            let map: BTreeMap<String, String> = items.into_iter().collect();
            map
        };
        let (a, b) = (make(), make());
        let sa = snap(
            &a.iter()
                .map(|(n, v)| (n.as_str(), v.as_str()))
                .collect::<Vec<_>>(),
        );
        let sb = snap(
            &b.iter()
                .map(|(n, v)| (n.as_str(), v.as_str()))
                .collect::<Vec<_>>(),
        );
        let want: Vec<String> = a
            .keys()
            .chain(b.keys())
            .filter(|n| a.get(*n) != b.get(*n))
            .cloned()
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        assert_eq!(&sb.changes_since(&sa)[..], &want[..]);
    });
}

#[test]
fn resolve_by_name_alias_and_vhds_namespace() {
    let vh = |name: &str, aliases: &[&str]| {
        Arc::new(
            Resource::new(ResourceType::VirtualHost, name, "1", vec![], None)
                .with_aliases(aliases.iter().map(|a| a.to_string()).collect()),
        )
    };
    let items = [
        vh("main/shop", &["main/shop.example.com"]),
        vh("main/blog", &["main/blog.example.com"]),
        vh("main/x/y", &[]),
        vh("mainly/other", &[]),
    ];
    let s = Snapshot::from_resources(&items);
    let t = s.get(ResourceType::VirtualHost);
    let names = |found: Vec<&Arc<Resource>>| -> Vec<String> {
        found.iter().map(|r| r.name.clone()).collect()
    };
    let kind = ResourceType::VirtualHost;
    assert_eq!(names(t.resolve(kind, "main/shop")), ["main/shop"]);
    assert_eq!(
        names(t.resolve(kind, "main/shop.example.com")),
        ["main/shop"]
    );
    assert_eq!(names(t.resolve(kind, "main")), ["main/blog", "main/shop"]);
    assert_eq!(names(t.resolve(kind, "main/x")), ["main/x/y"]);
    assert!(t.resolve(kind, "main/none.example.com").is_empty());
    assert!(t.resolve(kind, "nothing").is_empty());
}
