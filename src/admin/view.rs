//! One view-model of the fleet's replicas, for the CLI and the page alike: each replica's
//! row ([`ReplicaRow`], its words and its [`Tone`]) and what the view says beside the rows
//! ([`notes`]: who keeps the fleet from done and why, and the proxies orphaned by a replica
//! that vanished). Made once here from `/status`; the CLI prints it, the page escapes it.
//!
//! Must not: judge where the fleet stands (`admin::standing` does; its judgement is read
//! here), or format for a terminal or HTML.

use super::replicas::ReplicasStatus;
use super::Status;
use super::{Kept, LastGood};

/// How a replica's row reads: the page's colour, and whether the CLI says more.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tone {
    /// Done, or left as it was told to.
    Good,
    /// It gets there by itself.
    Wait,
    /// Someone has to act (a NACK, a failed load, ...), or it vanished.
    Act,
    /// As last read, not followed since: it may no longer be true.
    Stale,
}

impl Tone {
    /// Its class on the page.
    pub fn class(self) -> &'static str {
        match self {
            Tone::Good => "ok",
            Tone::Wait => "wait",
            Tone::Act => "bad",
            Tone::Stale => "stale",
        }
    }
}

/// One row of the replicas' table: what the CLI prints and the page shows, made once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplicaRow {
    /// Its name, and whether it is the replica asked.
    pub replica: String,
    pub this: bool,
    /// Its admin address (`-` when its summary did not give one).
    pub admin: String,
    /// `DONE`, `NACKED`, ..., `LEFT`, `VANISHED`; `(stale)` after it when not followed.
    pub standing: String,
    pub tone: Tone,
    /// The change its last load holds (the revision of the newest write under the prefix as
    /// of its read; the read's revision when not known yet), and the content it serves (the
    /// first 12 characters of `Config::content_version`): both the same on every replica
    /// serving the same documents.
    pub revision: String,
    pub version: String,
    pub proxies: usize,
    /// `-` for a replica that vanished.
    pub synced: String,
    pub nacked: String,
    /// When its summary was taken (its clock), or when it was seen gone (this one's).
    pub at: String,
}

impl ReplicaRow {
    /// The table's column names, as the CLI prints them (the page words them the same).
    pub const COLUMNS: [&'static str; 9] = [
        "REPLICA", "ADMIN", "STANDING", "REVISION", "VERSION", "PROXIES", "SYNCED", "NACKED",
        "AS OF",
    ];

    /// Its cells, in [`ReplicaRow::COLUMNS`]' order (not escaped).
    pub fn cells(&self) -> [String; 9] {
        let this = if self.this { " (this one)" } else { "" };
        [
            format!("{}{this}", self.replica),
            self.admin.clone(),
            self.standing.clone(),
            self.revision.clone(),
            self.version.clone(),
            self.proxies.to_string(),
            self.synced.clone(),
            self.nacked.clone(),
            self.at.clone(),
        ]
    }
}

/// Every replica's row: those sharing the view (by name), then those that vanished.
pub fn rows(replicas: &ReplicasStatus) -> Vec<ReplicaRow> {
    use crate::admin::standing::Severity;
    let dash = || "-".to_string();
    let mut rows: Vec<ReplicaRow> = replicas
        .replicas
        .iter()
        .map(|r| {
            let this = r.replica == replicas.this;
            // One that stopped is not judged: it says it left (operations.md).
            let (standing, tone) = if r.left {
                ("LEFT".to_string(), Tone::Good)
            } else {
                let tone = match r.standing.severity() {
                    Severity::Good => Tone::Good,
                    Severity::Wait => Tone::Wait,
                    Severity::Act => Tone::Act,
                };
                (r.standing.name().to_string(), tone)
            };
            // This replica's own row is its own word; the others' are as last read.
            let (standing, tone) = if replicas.stale && !this && !r.left {
                (format!("{standing} (stale)"), Tone::Stale)
            } else {
                (standing, tone)
            };
            ReplicaRow {
                replica: r.replica.clone(),
                this,
                admin: if r.admin.is_empty() {
                    dash()
                } else {
                    r.admin.clone()
                },
                standing,
                tone,
                revision: r
                    .changed
                    .or(r.revision)
                    .map_or_else(dash, |v| v.to_string()),
                version: if r.version.is_empty() {
                    dash()
                } else {
                    short(&r.version).to_string()
                },
                proxies: r.proxies,
                synced: r.synced.to_string(),
                nacked: r.nacked.to_string(),
                at: r.at.clone(),
            }
        })
        .collect();
    rows.extend(replicas.vanished.iter().map(|v| ReplicaRow {
        replica: v.replica.clone(),
        this: false,
        admin: if v.admin.is_empty() {
            dash()
        } else {
            v.admin.clone()
        },
        standing: "VANISHED".into(),
        tone: Tone::Act,
        revision: dash(),
        version: dash(),
        proxies: v.proxies,
        synced: dash(),
        nacked: dash(),
        at: v.since.clone(),
    }));
    rows
}

/// What the view says beside the rows, in lines for a person: each replica that keeps the
/// fleet from done and why (`admin::standing::fleet_standing`'s), then each vanished
/// replica's orphaned proxies.
pub fn notes(status: &Status) -> Vec<(String, String)> {
    let mut notes: Vec<(String, String)> = crate::admin::standing::fleet_standing(status)
        .1
        .into_iter()
        .map(|l| {
            let label = if l.standing == crate::admin::standing::Standing::ReplicaUnseen {
                "VIEW STALE".to_string()
            } else {
                format!(
                    "REPLICA {} {}",
                    l.replica,
                    l.standing.name().replace('_', " ")
                )
            };
            (label, l.why)
        })
        .collect();
    let Some(replicas) = &status.replicas else {
        return notes;
    };
    for v in &replicas.vanished {
        let mut why = format!(
            "its lease ended at {} without its leaving (killed, or cut off from etcd); of its \
             {} proxies, ",
            v.since, v.proxies
        );
        if v.orphaned.is_empty() && v.omitted == 0 {
            why.push_str("every one listed is served by another replica now");
        } else {
            let mut orphaned = v.orphaned.clone();
            orphaned.sort();
            let shown: Vec<&str> = orphaned.iter().take(20).map(String::as_str).collect();
            why.push_str(&format!(
                "{} no replica serves now (orphaned: they hold no gate until they reconnect){}{}",
                orphaned.len(),
                if shown.is_empty() {
                    String::new()
                } else {
                    format!(": {}", shown.join(", "))
                },
                if orphaned.len() > shown.len() {
                    format!(" and {} more", orphaned.len() - shown.len())
                } else {
                    String::new()
                }
            ));
            if v.omitted > 0 {
                why.push_str(&format!(
                    "; {} more were not listed in its summary",
                    v.omitted
                ));
            }
        }
        notes.push((format!("REPLICA {} VANISHED", v.replica), why));
    }
    notes
}
/// Under a NACK, in the same words on the CLI and the page: what the node still runs of the
/// type (`last_good`), and the command that writes it back when it came from etcd
/// (`source`: the source's URL as `/status` gives it); without it, how far back this
/// replica keeps (`kept`) and how to keep more.
pub fn going_back(
    node: &str,
    last_good: Option<&LastGood>,
    kept: Option<&Kept>,
    source: Option<&str>,
) -> String {
    let history = source
        .filter(|s| s.starts_with("etcd://"))
        .map(|url| format!(", and `switchyard history --source {url}` the revisions to go back to"))
        .unwrap_or_default();
    let Some(good) = last_good else {
        return match kept {
            Some(kept) => format!(
                "what it still runs is older than generation {}, the oldest of the {} this \
                 replica keeps (`serve --keep-generations` keeps more): `switchyard \
                 config-dump {node}` shows what it runs{history}",
                kept.oldest, kept.generations
            ),
            None => format!(
                "it runs nothing of this type yet (it rejected the first it was sent): \
                 nothing to go back to; `switchyard config-dump {node}` shows what it \
                 rejected"
            ),
        };
    };
    let version = short(&good.version);
    match (good.revision, source.filter(|s| s.starts_with("etcd://"))) {
        (Some(revision), Some(url)) => format!(
            "last good: revision {revision} (version {version}), which it still runs; to go \
             back: `switchyard rollback --source {url} {revision}`"
        ),
        (Some(revision), None) => {
            format!("last good: revision {revision} (version {version}), which it still runs")
        }
        (None, _) => format!(
            "last good: version {version} (generation {} here), which it still runs: the \
             files as they were then",
            good.generation
        ),
    }
}

/// A content version as the views show it: its first 12 characters.
pub fn short(version: &str) -> &str {
    version.get(..12).unwrap_or(version)
}
