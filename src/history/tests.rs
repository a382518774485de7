//! A generation's record: what changed, by file and by resource.

use super::*;
use crate::config::{load_documents, Document, LoadOptions};

fn config(documents: &[(&str, &str)]) -> Config {
    let documents: Vec<Document> = documents
        .iter()
        .map(|(name, text)| Document::text(*name, *text))
        .collect();
    load_documents(&documents, &LoadOptions::default()).expect("loads")
}

fn cluster(name: &str, timeout: &str) -> String {
    format!("clusters:\n  - name: {name}\n    connect_timeout: {timeout}\n")
}

#[test]
fn an_entry_names_the_files_and_resources_that_changed() {
    let old = config(&[
        ("a.yaml", &cluster("a", "1s")),
        ("b.yaml", &cluster("b", "1s")),
    ]);
    let new = config(&[
        ("a.yaml", &cluster("a", "2s")),
        ("c.yaml", &cluster("c", "1s")),
    ]);
    let entry = Entry::of(&old, &new, 7, Some(42));
    assert_eq!(
        entry.files,
        ["change a.yaml", "add c.yaml", "delete b.yaml"]
    );
    assert_eq!(
        (entry.added, entry.changed, entry.removed, entry.counts),
        (
            vec!["CDS c".to_string()],
            vec!["CDS a".to_string()],
            vec!["CDS b".to_string()],
            [1, 1, 1]
        )
    );
    assert_eq!((entry.generation, entry.revision), (7, Some(42)));
    // A resource moved from one file to another (for the same nodes) is not a change.
    let moved = config(&[
        (
            "a.yaml",
            &format!(
                "{}  - name: b\n    connect_timeout: 1s\n",
                cluster("a", "1s")
            ),
        ),
        ("b.yaml", "clusters: []\n"),
    ]);
    let shuffled = Entry::of(&old, &moved, 8, None);
    assert_eq!(shuffled.files, ["change a.yaml", "change b.yaml"]);
    assert_eq!(shuffled.counts, [0, 0, 0], "{shuffled:?}");
    assert_eq!(entry.version, new.content_version());
}

#[test]
fn the_history_keeps_the_last_generations_across_a_restart() {
    let dir = tempfile::tempdir().expect("tmp");
    let history = History::kept_in(dir.path());
    let empty = Config::default();
    let one = config(&[("a.yaml", &cluster("a", "1s"))]);
    for generation in 1..=(KEPT as u64 + 5) {
        history.record(Entry::of(&empty, &one, generation, None), |g| {
            (g == 1).then_some((3, 1))
        });
    }
    let entries = history.entries(|_| None);
    assert_eq!(entries.len(), KEPT, "only the last ones");
    assert_eq!(entries[0].generation, KEPT as u64 + 5, "newest first");
    // Counts given when recording are kept for the earlier ones; what is known now wins.
    let again = History::kept_in(dir.path());
    let kept = again.entries(|g| (g == KEPT as u64 + 5).then_some((9, 0)));
    assert_eq!(kept.len(), KEPT);
    assert_eq!((kept[0].acked, kept[0].nacked), (9, 0));
    // A file that does not read starts afresh.
    std::fs::write(dir.path().join("history.json"), "not json").expect("write");
    assert!(History::kept_in(dir.path()).entries(|_| None).is_empty());
}

/// A change of hundreds of files reads as counts and the first few paths, sorted.
#[test]
fn a_large_change_of_files_is_summarized() {
    let entry = Entry {
        files: (0..650)
            .rev()
            .map(|i| format!("add d/{i:03}.yaml"))
            .chain(["delete old.yaml".to_string()])
            .collect(),
        ..Entry::default()
    };
    assert_eq!(
        entry.files_summary(3),
        "651 file(s) (add 650, delete 1): add d/000.yaml, add d/001.yaml, add d/002.yaml and 648 more"
    );
    let small = Entry {
        files: vec!["change b.yaml".into(), "add a.yaml".into()],
        ..Entry::default()
    };
    assert_eq!(small.files_summary(3), "add a.yaml, change b.yaml");
}
