//! What each standing is, says and asks of a person: the words `switchyard status`, the
//! page and a replica's summary use. A replica's summary holds one (`admin::replicas`), and
//! `admin::standing` judges where the fleet stands in them.
//!
//! Must not: judge a status (`admin::standing` does).

/// Where the fleet stands, for a deploy to wait on (`switchyard status`'s exit code) and a
/// person to read (the page's headline). In a replica's summary by its name
/// (`SCREAMING_SNAKE_CASE`); a name this release does not know (a newer replica's) reads as
/// [`Standing::Unknown`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Standing {
    /// Every connected node runs the newest loaded generation, and no rollout is on.
    #[default]
    Done,
    LoadFailed,
    /// A long-running task of a replica stopped (ended or panicked) and waits to be started
    /// again: what it does (following the source, the fleet's rollout, ...) is not done
    /// meanwhile.
    TaskDown,
    SourceDown,
    RolloutStopped,
    Nacked,
    RollingOut,
    Updating,
    /// The other replicas cannot be seen: this replica cannot follow their summaries in
    /// etcd, so what it shows of them may be stale (an etcd source only).
    ReplicaUnseen,
    /// What another replica said it stands at, in a word this release does not know (a
    /// newer replica's): judged as a replica still updating, never as done.
    #[serde(other)]
    Unknown,
}

impl Standing {
    /// Whether it can change without someone acting (waiting makes sense).
    pub fn settles_by_itself(self) -> bool {
        matches!(self, Standing::RollingOut | Standing::Updating)
    }

    /// What it means, in a line.
    pub fn text(self) -> &'static str {
        match self {
            Standing::Done => "every connected node runs the newest generation",
            Standing::LoadFailed => "the last config load failed",
            Standing::TaskDown => {
                "a task of a replica stopped and is being started again: it serves what it has, \
                 following nothing that task follows"
            }
            Standing::SourceDown => {
                "the source does not answer: the last good generation serves, no edit gets through"
            }
            Standing::RolloutStopped => {
                "the rollout halted, or was aborted and the source differs from what serves"
            }
            Standing::Nacked => "a node rejected its configuration",
            Standing::RollingOut => "a rollout is in progress",
            Standing::Updating => "a node is still taking the newest generation",
            Standing::ReplicaUnseen => {
                "the other replicas cannot be seen: this replica cannot follow their summaries in etcd"
            }
            Standing::Unknown => {
                "a replica stands where this release cannot tell (a newer release's word)"
            }
        }
    }

    /// Its name in a replica's summary.
    pub fn name(self) -> &'static str {
        match self {
            Standing::Done => "DONE",
            Standing::LoadFailed => "LOAD_FAILED",
            Standing::TaskDown => "TASK_DOWN",
            Standing::SourceDown => "SOURCE_DOWN",
            Standing::RolloutStopped => "ROLLOUT_STOPPED",
            Standing::Nacked => "NACKED",
            Standing::RollingOut => "ROLLING_OUT",
            Standing::Updating => "UPDATING",
            Standing::ReplicaUnseen => "REPLICA_UNSEEN",
            Standing::Unknown => "UNKNOWN",
        }
    }

    pub fn from_name(name: &str) -> Option<Standing> {
        Standing::ALL.into_iter().find(|s| s.name() == name)
    }

    /// Every standing, worst first: where several replicas stand differently, the fleet
    /// stands where the first of them in this order does.
    pub const ALL: [Standing; 9] = [
        Standing::LoadFailed,
        Standing::TaskDown,
        Standing::SourceDown,
        Standing::ReplicaUnseen,
        Standing::RolloutStopped,
        Standing::Nacked,
        Standing::RollingOut,
        Standing::Updating,
        Standing::Done,
    ];

    /// Its place in [`Standing::ALL`].
    pub fn rank(self) -> usize {
        Standing::ALL
            .iter()
            .position(|s| *s == self)
            .unwrap_or(Standing::ALL.len())
    }
}

/// How a standing looks to a person: the page's headline colour.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Severity {
    /// Nothing to do.
    Good,
    /// It settles by itself: wait.
    Wait,
    /// Someone has to act.
    Act,
}

impl Standing {
    pub fn severity(self) -> Severity {
        match self {
            Standing::Done => Severity::Good,
            Standing::RollingOut | Standing::Updating | Standing::Unknown => Severity::Wait,
            Standing::ReplicaUnseen
            | Standing::TaskDown
            | Standing::LoadFailed
            | Standing::SourceDown
            | Standing::RolloutStopped
            | Standing::Nacked => Severity::Act,
        }
    }

    /// What to do next, with the command to run.
    pub fn next_step(self) -> &'static str {
        match self {
            Standing::Done => "nothing: the fleet runs the newest generation",
            Standing::LoadFailed => {
                "fix the errors under Config (`switchyard validate` shows them before you \
                 write); the last good generation serves meanwhile"
            }
            Standing::TaskDown => {
                "read the task's cause under Tasks and in the log (an ERROR naming the task); \
                 it is started again by itself, and a panic is a bug to report with that log"
            }
            Standing::SourceDown => {
                "bring etcd back, or check the replica's access to it; `switchyard status` \
                 exits 0 again once it answers"
            }
            Standing::RolloutStopped => {
                "look at the halted rollout below, then fix the configuration, or `switchyard \
                 rollout abort` to send the canaries back"
            }
            Standing::Nacked => {
                "fix the resource its NACK names, or roll back to the last good revision \
                 named under the NACK (with its `switchyard rollback` command); `switchyard \
                 config-dump NODE` shows what the node holds"
            }
            Standing::RollingOut => {
                "wait for the canaries and the bake (`switchyard status --wait`), or `switchyard \
                 rollout promote` to send it to every node now"
            }
            Standing::Updating => {
                "wait: `switchyard status --wait` returns once every node has ACKed"
            }
            Standing::ReplicaUnseen => {
                "check this replica's access to etcd (the reason is under Replicas); ask \
                 another replica's `switchyard status` meanwhile"
            }
            Standing::Unknown => {
                "ask that replica: its own `switchyard status` says where it stands"
            }
        }
    }
}
