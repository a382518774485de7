//! Every key Switchyard keeps in etcd, in one place. For a source `etcd://MEMBERS/P`:
//!
//! ```text
//! P/NAME                      a document (NAME without a `.`-named part), as `apply` writes it
//! P/.switchyard/applied       the guard: every apply writes it in its transaction (with its
//!                             note: who, why, what it read), so two applies from one read
//!                             cannot both land
//! P/.switchyard/switching     an apply too large for one transaction is switching the prefix
//!                             over: readers hold what it held until the key goes
//! P.staging/ID/NAME           that apply's documents, staged before the switch
//! P.staging/ID/.alive         on the apply's lease: the apply is alive
//! P.rollout/state             the fleet's rollout (`rollout::fleetwide::FleetState`)
//! P.rollout/replicas/NAME     replica NAME's canaries' verdict, on its lease
//! P.rollout/bake              the candidate baking, on a lease as long as the bake
//! P.stable/REVISION/NAME      the promoted generation's documents, copied
//! P.replicas/NAME             replica NAME's summary of its proxies, on its lease
//! ```
//!
//! Everything but the documents sits beside the prefix (`P.`), or under it in a `.`-named
//! part, so the documents' watch and an apply's guard never take it for a document, while
//! an etcd role granted `P` as a prefix covers all of it.
//!
//! Must not: talk to etcd (the modules that own each key do).

use crate::source::EtcdUrl;

/// The guard key's name under the prefix.
pub const GUARD: &str = ".switchyard/applied";
/// The switch key's name under the prefix.
pub const SWITCHING: &str = ".switchyard/switching";

/// `P` without a trailing `/`: what the keys beside the prefix start with.
fn beside(url: &EtcdUrl) -> &str {
    url.prefix.trim_end_matches('/')
}

/// `P/.switchyard/applied`.
pub fn guard(url: &EtcdUrl) -> String {
    format!("{}{GUARD}", url.key_prefix())
}

/// `P/.switchyard/switching`.
pub fn switching(url: &EtcdUrl) -> String {
    format!("{}{SWITCHING}", url.key_prefix())
}

/// `P.staging/`: every apply's staging.
pub fn stagings(url: &EtcdUrl) -> String {
    format!("{}.staging/", beside(url))
}

/// `P.staging/ID/`: apply `id`'s staging.
pub fn staging(url: &EtcdUrl, id: &str) -> String {
    format!("{}{id}/", stagings(url))
}

/// `P.rollout/`: the fleet's rollout.
pub fn rollout(url: &EtcdUrl) -> String {
    format!("{}.rollout/", beside(url))
}

/// `P.rollout/state`.
pub fn rollout_state(url: &EtcdUrl) -> String {
    format!("{}state", rollout(url))
}

/// `P.rollout/bake`.
pub fn bake(url: &EtcdUrl) -> String {
    format!("{}bake", rollout(url))
}

/// `P.rollout/replicas/`: every replica's verdict.
pub fn verdicts(url: &EtcdUrl) -> String {
    format!("{}replicas/", rollout(url))
}

/// `P.stable/`: every promoted copy.
pub fn stables(url: &EtcdUrl) -> String {
    format!("{}.stable/", beside(url))
}

/// `P.stable/REVISION/`: the copy of the documents promoted at `revision`.
pub fn stable(url: &EtcdUrl, revision: i64) -> String {
    format!("{}{revision}/", stables(url))
}

/// `P.replicas/`: every replica's summary.
pub fn summaries(url: &EtcdUrl) -> String {
    format!("{}.replicas/", beside(url))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The layout as the module documents it, and none of Switchyard's keys a document.
    #[test]
    fn the_layout_is_as_documented_and_nothing_of_it_is_a_document() {
        let url = EtcdUrl {
            endpoints: vec!["127.0.0.1:2379".into()],
            prefix: "/fleet/".into(),
        };
        let keys = [
            (guard(&url), "/fleet/.switchyard/applied"),
            (switching(&url), "/fleet/.switchyard/switching"),
            (staging(&url, "7-1"), "/fleet.staging/7-1/"),
            (rollout_state(&url), "/fleet.rollout/state"),
            (bake(&url), "/fleet.rollout/bake"),
            (format!("{}a", verdicts(&url)), "/fleet.rollout/replicas/a"),
            (stable(&url, 12), "/fleet.stable/12/"),
            (format!("{}a", summaries(&url)), "/fleet.replicas/a"),
        ];
        for (key, want) in keys {
            assert_eq!(key, want);
            assert!(
                !super::super::is_document(&url.key_prefix(), &key),
                "{key} is not a document"
            );
        }
        assert!(super::super::is_document(
            &url.key_prefix(),
            "/fleet/a.yaml"
        ));
    }
}
