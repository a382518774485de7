//! The hand-over from the sink to the fleet's rollout: the newest good load not taken yet,
//! in one slot, and what the applies behind recent loads said of themselves.
//!
//! Must not: load, publish or decide anything; it only holds what is handed over.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use crate::config::{self, Config, LoadWork};
use crate::source::etcd::ApplyNote;

/// How many apply notes are remembered while their loads wait to be published.
const NOTES_KEPT: usize = 16;

/// A good load of the documents read at one revision, for the fleet's rollout to propose.
#[derive(Debug)]
pub struct Head {
    pub revision: i64,
    /// What it serves (`Config::content_version`).
    pub version: String,
    /// The load, unless it was published already (the first, served at start).
    pub config: Option<Config>,
    /// What the load parsed anew and reused.
    pub work: LoadWork,
    pub documents: Arc<Vec<config::Document>>,
    /// Written by `rollback --now`, by whom: the fleet's rollout promotes it at once.
    pub now: Option<String>,
}

impl Head {
    /// The same load without its configuration (loaded again from its documents).
    fn without_config(&self) -> Head {
        Head {
            revision: self.revision,
            version: self.version.clone(),
            config: None,
            work: self.work,
            documents: Arc::clone(&self.documents),
            now: self.now.clone(),
        }
    }
}

/// The newest good load the fleet's rollout has not taken yet: one slot, a newer load
/// replacing an older one (the rollout proposes only the newest), never a queue of whole
/// configurations.
#[derive(Debug, Default)]
pub struct Heads {
    slot: Mutex<Slot>,
    ready: tokio::sync::Notify,
}

#[derive(Debug, Default)]
struct Slot {
    /// The load not taken yet.
    waiting: Option<Head>,
    /// The last load put (without its configuration).
    last: Option<Head>,
    /// What the applies behind the last loads said of themselves, by revision, oldest
    /// first: a generation's history entry names the author and the message whenever it
    /// is published (by this replica's load or from the documents another replica named).
    notes: VecDeque<(i64, ApplyNote)>,
}

impl Heads {
    fn slot(&self) -> std::sync::MutexGuard<'_, Slot> {
        self.slot.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Hand a good load over, replacing one not taken yet, with what its apply said of
    /// itself.
    pub fn put(&self, head: Head, note: Option<ApplyNote>) {
        let mut slot = self.slot();
        if let Some(note) = note {
            if slot.notes.len() == NOTES_KEPT {
                slot.notes.pop_front();
            }
            slot.notes.push_back((head.revision, note));
        }
        slot.last = Some(head.without_config());
        slot.waiting = Some(head);
        drop(slot);
        self.ready.notify_one();
    }

    /// The newest load not taken yet, once there is one. Cancel-safe: a load is taken only
    /// when this returns it.
    pub async fn next(&self) -> Head {
        loop {
            if let Some(head) = self.slot().waiting.take() {
                return head;
            }
            self.ready.notified().await;
        }
    }

    /// The configuration of the waiting load of `revision`, taken out of it (the load stays,
    /// for the rollout to propose): to serve it at start, before the rollout runs.
    pub fn take_config(&self, revision: i64) -> Option<(Config, LoadWork)> {
        let mut slot = self.slot();
        let head = slot.waiting.as_mut().filter(|h| h.revision == revision)?;
        let work = head.work;
        head.config.take().map(|config| (config, work))
    }

    /// What the apply behind the load of `revision` said of itself, if one did.
    pub fn note_of(&self, revision: i64) -> Option<ApplyNote> {
        self.slot()
            .notes
            .iter()
            .rev()
            .find(|(r, _)| *r == revision)
            .map(|(_, note)| note.clone())
    }

    /// For a rollout driver started again (after it stopped): the last load handed over is
    /// handed over again (without its configuration) unless a newer one waits, so none is
    /// lost with the driver that took it.
    pub fn again(&self) {
        let mut slot = self.slot();
        if slot.waiting.is_none() {
            slot.waiting = slot.last.as_ref().map(Head::without_config);
        }
        drop(slot);
        self.ready.notify_one();
    }
}
