//! The etcd source: reading snapshot documents from etcd (every key under the prefix, at one
//! revision, in one range request: etcd's `Range` is a consistent read of one revision),
//! writing them (`apply`'s guarded transaction), and following the prefix ([`follow`]).
//!
//! Must not: parse documents.

pub mod follow;
pub mod keys;
pub mod lease;
pub mod session;
pub mod switch;

use std::time::Duration;

use switchyard_etcd::{Client, ConnectOptions, GetOptions};

use super::{Documents, EtcdUrl, SourceError};
use crate::config::Document;

/// The name a document goes by in errors: `etcd:` and its key.
pub fn document_name(key: &str) -> String {
    format!("etcd:{key}")
}

/// Whether `key` (under `prefix`, [`EtcdUrl::key_prefix`]) holds a document: Switchyard's
/// own keys (`.switchyard/...`, any `.`-named part), and the prefix key itself, do not.
pub fn is_document(prefix: &str, key: &str) -> bool {
    let name = key.get(prefix.len()..).unwrap_or_default();
    key.starts_with(prefix)
        && !name.is_empty()
        && !name.split('/').any(|part| part.starts_with('.'))
}

/// The document a key under the prefix holds: its value as it is (a value that is not text
/// is a bad document for the loader to refuse, naming the key, never a failure to read).
pub fn document(key: &str, value: &[u8]) -> Document {
    Document::from_bytes(document_name(key), value.to_vec())
}

/// How to reach etcd beyond its URL, as etcd's clients take it: TLS (the CA to trust, and
/// a client certificate to present), and a user for etcd's authentication.
#[derive(Clone, Debug, Default)]
pub struct Access {
    /// The CA's PEM, and the client certificate and key (PEM), if any.
    pub tls: Option<(String, Option<(String, String)>)>,
    /// User name and password.
    pub user: Option<(String, String)>,
}

/// An etcd prefix to serve from (`serve --source`), and how to reach it.
#[derive(Clone, Debug)]
pub struct Prefix {
    pub url: EtcdUrl,
    pub access: Access,
    /// The longest the first connect, and each read at start, may take (`--source-timeout`).
    pub timeout: Duration,
}

impl Prefix {
    /// The first read: connect, and read every document under the prefix at the latest
    /// revision. The client is returned for the reads that go with it (the fleet's rollout).
    pub async fn read_first(&self) -> Result<(Client, Documents), SourceError> {
        connect_and_read(&self.url, &self.access, None, self.timeout).await
    }
}

/// Whether the documents under the prefix (Switchyard's own keys too) are the same at
/// revision `to` as at `from` (`from < to`): no key alive at `to` was written after `from`,
/// and as many keys are alive at both (so none was deleted). `false` too when `from` was
/// compacted away and cannot be compared.
pub async fn unchanged_between(
    client: &mut Client,
    url: &EtcdUrl,
    from: i64,
    to: i64,
) -> Result<bool, SourceError> {
    // etcd's `count` ignores the mod-revision filters: keys written since are asked for
    // (one is enough; etcd filters before it limits), and the totals counted.
    let ask = |options: GetOptions| {
        let mut client = client.clone();
        let prefix = url.key_prefix();
        async move {
            match client.get(prefix, Some(options.with_prefix())).await {
                Ok(answer) => Ok(Some(answer)),
                // etcd's OUT_OF_RANGE on a read in the past: the revision was compacted
                // (the revisions asked for are never in the future).
                Err(switchyard_etcd::Error::GRpcStatus(s))
                    if s.code() == tonic::Code::OutOfRange =>
                {
                    Ok(None)
                }
                Err(e) => Err(SourceError::Unavailable {
                    url: url.display(),
                    message: format!("cannot read the prefix: {}", crate::source::etcd::words(&e)),
                }),
            }
        }
    };
    let written_since = ask(GetOptions::new()
        .with_revision(to)
        .with_min_mod_revision(from + 1)
        .with_keys_only()
        .with_limit(1))
    .await?;
    if written_since.is_none_or(|answer| !answer.kvs().is_empty()) {
        return Ok(false);
    }
    let count = |revision| ask(GetOptions::new().with_revision(revision).with_count_only());
    let (at_from, at_to) = (count(from).await?, count(to).await?);
    Ok(match (at_from, at_to) {
        (Some(a), Some(b)) => a.count() == b.count(),
        _ => false,
    })
}

/// The store's revision now, as a read of the prefix sees it: every write under the prefix
/// made before this call is at or below it.
pub async fn current_revision(client: &mut Client, url: &EtcdUrl) -> Result<i64, SourceError> {
    let answer = client
        .get(
            url.key_prefix(),
            Some(GetOptions::new().with_prefix().with_count_only()),
        )
        .await
        .map_err(|e| SourceError::Unavailable {
            url: url.display(),
            message: format!(
                "cannot read the revision: {}",
                crate::source::etcd::words(&e)
            ),
        })?;
    answer
        .header()
        .map(|h| h.revision())
        .ok_or_else(|| SourceError::Unavailable {
            url: url.display(),
            message: "its answer has no header".into(),
        })
}

/// How often the etcd channel pings etcd (HTTP/2 PING) while a call is open on it, and how
/// long an answer may take before the channel is closed as dead: a partition (packets lost,
/// no reset) ends every watch and lease renewal on it within their sum, so a replica cut
/// from etcd knows it within seconds (docs/operations.md "Faults beyond a kill"). etcd
/// refuses pings more often than every 5 s (`--grpc-keepalive-min-time`), and pings with
/// no call open, so the channel pings only while one is.
pub const KEEP_ALIVE_EVERY: Duration = Duration::from_secs(6);
pub const KEEP_ALIVE_TIMEOUT: Duration = Duration::from_secs(3);

/// How long etcd may fail to answer before a replica says it is away (its source down, its
/// view of the other replicas stale, an outage logged): what fails is tried again at once
/// meanwhile. With the channel's ping timeout before the first failure, an etcd stall
/// shorter than half a summary's lease (7.5 s) is never said, while a partition is said
/// within [`KEEP_ALIVE_EVERY`], [`KEEP_ALIVE_TIMEOUT`] and this (at most 14 s).
pub const OUTAGE_AFTER: Duration = Duration::from_secs(5);

/// Connect to the members of `url` as `access` says, each try bounded by `timeout`; the
/// channel pings etcd while a call is open ([`KEEP_ALIVE_EVERY`]).
pub async fn connect(
    url: &EtcdUrl,
    access: &Access,
    timeout: Duration,
) -> Result<Client, SourceError> {
    let mut options = ConnectOptions::new()
        .with_connect_timeout(timeout)
        .with_timeout(timeout)
        .with_keep_alive(KEEP_ALIVE_EVERY, KEEP_ALIVE_TIMEOUT)
        .with_keep_alive_while_idle(false);
    if let Some((name, password)) = &access.user {
        options = options.with_user(name.as_str(), password.as_str());
    }
    let scheme = if access.tls.is_some() {
        "https"
    } else {
        "http"
    };
    if let Some((ca, identity)) = &access.tls {
        let mut tls = switchyard_etcd::TlsOptions::new()
            .ca_certificate(switchyard_etcd::Certificate::from_pem(ca.as_bytes()));
        if let Some((cert, key)) = identity {
            tls = tls.identity(switchyard_etcd::Identity::from_pem(
                cert.as_bytes(),
                key.as_bytes(),
            ));
        }
        options = options.with_tls(tls);
    }
    let endpoints: Vec<String> = url
        .endpoints
        .iter()
        .map(|e| format!("{scheme}://{e}"))
        .collect();
    Client::connect(&endpoints, Some(options))
        .await
        .map_err(|e| SourceError::Unavailable {
            url: url.display(),
            message: format!("cannot connect: {}", crate::source::etcd::words(&e)),
        })
}

/// The largest answer a read of a whole prefix may be: a snapshot of 100,000 clusters is
/// some 34 MB (gRPC's default limit of 4 MiB would refuse it).
pub const MAX_READ_BYTES: usize = 1 << 30;

/// A key-value client for reading whole prefixes (see [`MAX_READ_BYTES`]).
pub fn reader(client: &Client) -> switchyard_etcd::KvClient {
    client.kv_client().max_decoding_message_size(MAX_READ_BYTES)
}

/// A watch client for whole prefixes (a response may carry many documents).
pub fn watcher(client: &Client) -> switchyard_etcd::WatchClient {
    client
        .watch_client()
        .max_decoding_message_size(MAX_READ_BYTES)
}

/// Connect and read every document under the prefix at `revision` (the latest: `None`),
/// each bounded by `timeout`: what every command that reads a prefix once does first. The
/// client is returned for what comes next.
pub async fn connect_and_read(
    url: &EtcdUrl,
    access: &Access,
    revision: Option<i64>,
    timeout: Duration,
) -> Result<(Client, Documents), SourceError> {
    let mut client = connect(url, access, timeout).await?;
    let snapshot = tokio::time::timeout(timeout, read_at(&mut client, url, revision))
        .await
        .map_err(|_| SourceError::Unavailable {
            url: url.display(),
            message: format!("no answer within {}", humantime::format_duration(timeout)),
        })??;
    Ok((client, snapshot))
}

/// Every document under the prefix, read at one revision (the latest).
pub async fn read(client: &mut Client, url: &EtcdUrl) -> Result<Documents, SourceError> {
    read_at(client, url, None).await
}

/// Every document under the prefix as it was at `revision` (the latest: `None`), while etcd
/// keeps that revision (back to its last compaction).
pub async fn read_at(
    client: &mut Client,
    url: &EtcdUrl,
    revision: Option<i64>,
) -> Result<Documents, SourceError> {
    let unavailable = |message: String| SourceError::Unavailable {
        url: url.display(),
        message,
    };
    let prefix = url.key_prefix();
    let mut options = GetOptions::new().with_prefix();
    if let Some(revision) = revision {
        options = options.with_revision(revision);
    }
    let response = reader(client)
        .get(prefix.as_str(), Some(options))
        .await
        .map_err(|e| match revision {
            Some(r) => unavailable(format!(
                "cannot read the prefix {prefix:?} at revision {r}: {}",
                crate::source::etcd::words(&e)
            )),
            None => unavailable(format!(
                "cannot read the prefix {prefix:?}: {}",
                crate::source::etcd::words(&e)
            )),
        })?;
    let revision = response.header().map_or(0, |h| h.revision());
    // An apply switching the prefix over ([`switch`]): what every reader sees is the
    // prefix as it was before the switch began (and a follower watches from there, so it
    // holds until the switch ends).
    let switching = keys::switching(url);
    if let Some(kv) = response
        .kvs()
        .iter()
        .find(|kv| kv.key() == switching.as_bytes())
    {
        return Box::pin(read_at(client, url, Some(kv.create_revision() - 1))).await;
    }
    let mut documents = Vec::new();
    for kv in response.kvs() {
        let key = String::from_utf8_lossy(kv.key()).into_owned();
        if !is_document(&prefix, &key) {
            continue;
        }
        documents.push(document(&key, kv.value()));
    }
    Ok(Documents {
        revision,
        documents,
    })
}

/// What an apply says of itself in the guard key it writes with the documents: when, who
/// and why (`apply --author`, `--message`), what it read, and a nonce. One type, written by
/// `apply` and read by every replica, `history` and `status`; fields are only added.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ApplyNote {
    /// The revision the apply read the prefix at.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_at: Option<i64>,
    /// How many documents it wrote the prefix to hold.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub documents: Option<usize>,
    #[serde(default)]
    pub at: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub author: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// `rollback REVISION`: the revision whose documents it wrote back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollback: Option<i64>,
    /// `rollback --now`: every node gets it at once, skipping the canaries and the bake.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub now: bool,
    /// Unique to this apply (its process and time): a write whose answer was lost is told
    /// by it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub nonce: String,
}

impl ApplyNote {
    /// The note as the guard key holds it (JSON).
    pub fn text(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// What `apply` writes: documents put (new or changed), and keys deleted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Change {
    pub put: Vec<(String, String)>,
    pub delete: Vec<String>,
}

impl Change {
    pub fn is_empty(&self) -> bool {
        self.put.is_empty() && self.delete.is_empty()
    }

    /// Whether it goes in one transaction within etcd's default limits (128 operations,
    /// 1.5 MiB a request), with the guard key: else it is switched ([`switch`]).
    pub fn fits_one_transaction(&self) -> bool {
        let bytes: usize = self
            .put
            .iter()
            .map(|(k, v)| k.len() + v.len())
            .sum::<usize>()
            + self.delete.iter().map(String::len).sum::<usize>();
        self.put.len() + self.delete.len() < switch::BATCH_OPS && bytes < switch::BATCH_BYTES
    }
}

/// What `apply` read before it decided: the prefix's revision, and the guard key's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadAt {
    pub revision: i64,
    /// The guard key's last modification (0: never applied).
    pub guard: i64,
}

/// The guard key's last modification (0: none).
pub async fn guard_revision(client: &mut Client, url: &EtcdUrl) -> Result<i64, SourceError> {
    Ok(guarded_by(client, url).await?.1)
}

/// What a write decides from: every document, and the revisions its guard compares. Read
/// again (it changes nothing) while etcd answers with an error, until `deadline`: a member
/// lost or a leader being elected is a moment's unavailability, not a reason to give up.
pub async fn read_for_write(
    client: &mut Client,
    url: &EtcdUrl,
    deadline: tokio::time::Instant,
) -> Result<(Documents, ReadAt), SourceError> {
    loop {
        let tried = async {
            let held = read(client, url).await?;
            let guard = guard_revision(client, url).await?;
            let at = ReadAt {
                revision: held.revision,
                guard,
            };
            Ok::<_, SourceError>((held, at))
        };
        match tokio::time::timeout_at(deadline, tried).await {
            Ok(Ok(read)) => return Ok(read),
            Ok(Err(e)) if tokio::time::Instant::now() + RETRY >= deadline => return Err(e),
            Ok(Err(_)) => tokio::time::sleep(RETRY).await,
            Err(_) => {
                return Err(SourceError::Unavailable {
                    url: url.display(),
                    message: "no answer in time".into(),
                })
            }
        }
    }
}

/// The store's revision now, and the revision at which a key under the prefix was last
/// written (0 when none is), in one request of one key's name.
pub async fn now_and_last_write(
    client: &mut Client,
    url: &EtcdUrl,
) -> Result<(i64, i64), SourceError> {
    let options = GetOptions::new()
        .with_prefix()
        .with_keys_only()
        .with_limit(1)
        .with_sort(
            switchyard_etcd::SortTarget::Mod,
            switchyard_etcd::SortOrder::Descend,
        );
    let answer = client
        .get(url.key_prefix(), Some(options))
        .await
        .map_err(|e| SourceError::Unavailable {
            url: url.display(),
            message: format!(
                "cannot read the revision: {}",
                crate::source::etcd::words(&e)
            ),
        })?;
    let now = answer.header().map_or(0, |h| h.revision());
    Ok((now, answer.kvs().first().map_or(0, |kv| kv.mod_revision())))
}

/// The revision at which a key under the prefix (Switchyard's own keys too, such as apply's
/// guard) was last written; 0 when none is.
pub async fn last_write(client: &mut Client, url: &EtcdUrl) -> Result<i64, SourceError> {
    Ok(now_and_last_write(client, url).await?.1)
}

/// The wait between two tries of an operation etcd failed.
const RETRY: Duration = Duration::from_millis(250);

/// Why an apply wrote nothing.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    #[error(
        "the prefix changed since revision {read} (another apply, or a direct write); \
         nothing was written: apply again to see the change against what etcd holds now"
    )]
    Changed { read: i64 },
    #[error(
        "the prefix moved past revision {expected} (--expect-revision): a key under it was \
         written at revision {last} (another apply, or a direct write); nothing was written. \
         Look at what changed (`switchyard history --source ...`), then apply against what \
         etcd holds now"
    )]
    Moved { expected: i64, last: i64 },
    #[error(
        "etcd did not answer the write, and whether it landed cannot be told ({message}); \
         run apply again: it says \"nothing to apply\" if this one landed"
    )]
    Unknown { message: String },
    /// etcd answered that it did not apply the write (a limit, a permission): nothing
    /// was written, for sure.
    #[error("etcd refused the write, nothing was written: {message}{hint}")]
    Refused { message: String, hint: &'static str },
    /// A switch (an apply too large for one transaction) was ended by another apply.
    #[error(
        "another apply finished this apply's switch of the prefix; run apply again to see \
         the change against what etcd holds now"
    )]
    Switched,
    /// A switch began and could not end in time: readers hold what the prefix held before.
    #[error(
        "the switch of the prefix began and could not end in time ({message}): every replica \
         keeps serving what the prefix held before it; run apply again (with etcd answering) \
         to finish it"
    )]
    HalfSwitched { message: String },
    /// Another apply is switching the prefix now.
    #[error(
        "another apply is switching the prefix over (a large change, in several \
         transactions) and did not end within --source-timeout; nothing was written: apply \
         again once it has ended (one that stopped mid-way is given up within {} s: a \
         --source-timeout longer than that waits for it)",
        switch::ALIVE_TTL
    )]
    Busy,
    #[error(transparent)]
    Unavailable(#[from] SourceError),
}

/// Whether etcd's answer to a write says it was not applied (rather than that its outcome
/// is unknown): the request was invalid (too many operations, too large) or not allowed.
fn refused(e: &switchyard_etcd::Error) -> Option<ApplyError> {
    let switchyard_etcd::Error::GRpcStatus(status) = e else {
        return None;
    };
    use tonic::Code;
    // gRPC's own bound on a request (etcd's is 1.5 MiB, gRPC's above it) refuses it before
    // etcd sees it.
    let too_big =
        status.code() == Code::ResourceExhausted && status.message().contains("larger than max");
    if !too_big
        && !matches!(
            status.code(),
            Code::InvalidArgument
                | Code::FailedPrecondition
                | Code::PermissionDenied
                | Code::Unauthenticated
        )
    {
        return None;
    }
    let message = status.message().to_string();
    let hint = if message.contains("too many operations") {
        " (etcd's --max-txn-ops bounds one transaction: it is below the 100 operations an \
         apply puts in one; raise it to at least 128, etcd's default, on every member)"
    } else if message.contains("too large") || too_big {
        " (etcd's --max-request-bytes, 1.5 MiB by default, bounds one request, and one \
         document goes in one request: make the document smaller, or raise the limit on \
         every member)"
    } else {
        ""
    };
    Some(ApplyError::Refused { message, hint })
}

/// Write `change` in one transaction, guarded by what was read at `at`: it lands only if no
/// key under the prefix was written since, and no other apply landed since (the guard
/// key, which this one writes too, holding `note`). The revision it landed at.
///
/// When etcd fails to answer the write (a leader lost mid-request), whether it landed is not
/// known: the guard key says. If it holds this `note`, it landed; if another apply's, this
/// one is refused; if it is unchanged, nothing landed and the write is tried again, until
/// `deadline`. `note` must be unique to this apply (it carries the time and a nonce).
pub async fn apply(
    client: &mut Client,
    url: &EtcdUrl,
    change: &Change,
    at: ReadAt,
    note: &str,
    deadline: tokio::time::Instant,
) -> Result<i64, ApplyError> {
    if !change.fits_one_transaction() {
        return switch::apply(client, url, change, at, note, deadline).await;
    }
    let mut failed = None;
    loop {
        if failed.is_some() {
            let looked = tokio::time::timeout_at(deadline, guarded_by(client, url)).await;
            match looked.unwrap_or_else(|_| {
                Err(SourceError::Unavailable {
                    url: url.display(),
                    message: "no answer in time".into(),
                })
            }) {
                Ok((value, revision)) if value == note.as_bytes() => return Ok(revision),
                Ok((_, revision)) if revision != at.guard => {
                    return Err(ApplyError::Changed { read: at.revision })
                }
                Ok(_) | Err(_) => {}
            }
            if tokio::time::Instant::now() + RETRY >= deadline {
                return Err(ApplyError::Unknown {
                    message: failed.unwrap_or_default(),
                });
            }
            tokio::time::sleep(RETRY).await;
        }
        match tokio::time::timeout_at(deadline, write_once(client, url, change, at, note)).await {
            Ok(Ok(landed)) => return Ok(landed),
            Ok(Err(ApplyError::Unavailable(e))) => failed = Some(e.to_string()),
            Ok(Err(e)) => return Err(e),
            Err(_) => {
                failed = Some("no answer in time".into());
                // One more look at the guard, however late.
                if let Ok(Ok((value, revision))) =
                    tokio::time::timeout(Duration::from_secs(2), guarded_by(client, url)).await
                {
                    if value == note.as_bytes() {
                        return Ok(revision);
                    }
                }
                return Err(ApplyError::Unknown {
                    message: failed.unwrap_or_default(),
                });
            }
        }
    }
}

/// The guard key's value and last modification.
async fn guarded_by(client: &mut Client, url: &EtcdUrl) -> Result<(Vec<u8>, i64), SourceError> {
    let response =
        client
            .get(keys::guard(url), None)
            .await
            .map_err(|e| SourceError::Unavailable {
                url: url.display(),
                message: format!(
                    "cannot read {}: {}",
                    crate::source::etcd::words(&e),
                    keys::guard(url)
                ),
            })?;
    Ok(response.kvs().first().map_or((Vec::new(), 0), |kv| {
        (kv.value().to_vec(), kv.mod_revision())
    }))
}

/// One try of [`apply`]'s transaction.
async fn write_once(
    client: &mut Client,
    url: &EtcdUrl,
    change: &Change,
    at: ReadAt,
    note: &str,
) -> Result<i64, ApplyError> {
    use switchyard_etcd::{Compare, CompareOp, Txn, TxnOp};
    let prefix = url.key_prefix();
    let guard = keys::guard(url);
    let mut ops: Vec<TxnOp> = change
        .put
        .iter()
        .map(|(key, text)| TxnOp::put(key.as_str(), text.as_str(), None))
        .collect();
    ops.extend(
        change
            .delete
            .iter()
            .map(|key| TxnOp::delete(key.as_str(), None)),
    );
    ops.push(TxnOp::put(guard.as_str(), note, None));
    let txn = Txn::new()
        .when(vec![
            Compare::mod_revision(prefix.as_str(), CompareOp::Less, at.revision + 1).with_prefix(),
            Compare::mod_revision(guard.as_str(), CompareOp::Equal, at.guard),
        ])
        .and_then(ops);
    let response = client.txn(txn).await.map_err(|e| {
        refused(&e).unwrap_or_else(|| {
            ApplyError::Unavailable(SourceError::Unavailable {
                url: url.display(),
                message: format!("cannot write: {}", crate::source::etcd::words(&e)),
            })
        })
    })?;
    if !response.succeeded() {
        return Err(ApplyError::Changed { read: at.revision });
    }
    Ok(response.header().map_or(0, |h| h.revision()))
}

/// The revisions at which documents under the prefix changed (Switchyard's own keys aside),
/// oldest first, as far back as etcd keeps them; and the oldest revision it keeps (1, or its
/// last compaction). Read by replaying the prefix's events from then; the replay is over
/// when they stop for half a second (etcd 3.4 answers a progress request before a replay,
/// so it cannot say).
pub async fn changes(
    client: &mut Client,
    url: &EtcdUrl,
    timeout: Duration,
) -> Result<(Vec<i64>, i64), SourceError> {
    const QUIET: Duration = Duration::from_millis(500);
    let unavailable = |message: String| SourceError::Unavailable {
        url: url.display(),
        message,
    };
    let prefix = url.key_prefix();
    let mut start = 1;
    'replay: loop {
        let options = switchyard_etcd::WatchOptions::new()
            .with_prefix()
            .with_start_revision(start);
        let mut stream = watcher(client)
            .watch(prefix.as_str(), Some(options))
            .await
            .map_err(|e| {
                unavailable(format!(
                    "cannot read the history of changes: {}",
                    crate::source::etcd::words(&e)
                ))
            })?;
        let mut revisions = std::collections::BTreeSet::new();
        // Switches (an apply in several transactions): where each began and ended.
        let mut switches: Vec<(i64, Option<i64>)> = Vec::new();
        let switch_key = keys::switching(url);
        let deadline = tokio::time::Instant::now() + timeout;
        let mut created = false;
        loop {
            let message = match tokio::time::timeout(QUIET, stream.message()).await {
                Ok(message) => message.map_err(|e| {
                    unavailable(format!(
                        "cannot read the history of changes: {}",
                        crate::source::etcd::words(&e)
                    ))
                })?,
                Err(_) if created => return Ok((as_readers_saw(revisions, &switches), start)),
                Err(_) if tokio::time::Instant::now() < deadline => continue,
                Err(_) => return Err(unavailable("the history took too long to read".into())),
            };
            let Some(response) = message else {
                return Err(unavailable("the watch ended".into()));
            };
            if response.compact_revision() > 0 {
                start = response.compact_revision();
                continue 'replay;
            }
            created |= response.created();
            for event in response.events() {
                let Some(kv) = event.kv() else { continue };
                if kv.key() == switch_key.as_bytes() {
                    match event.event_type() {
                        switchyard_etcd::EventType::Put => switches.push((kv.mod_revision(), None)),
                        switchyard_etcd::EventType::Delete => {
                            if let Some(open) = switches.last_mut().filter(|s| s.1.is_none()) {
                                open.1 = Some(kv.mod_revision());
                            }
                        }
                    }
                } else if is_document(&prefix, &String::from_utf8_lossy(kv.key())) {
                    revisions.insert(kv.mod_revision());
                }
            }
        }
    }
}

/// The revisions at which readers saw the documents change: a switch's transactions are one
/// change, at its end (one not ended yet is none).
fn as_readers_saw(
    mut revisions: std::collections::BTreeSet<i64>,
    switches: &[(i64, Option<i64>)],
) -> Vec<i64> {
    for (began, ended) in switches {
        revisions.retain(|r| r < began || ended.is_some_and(|end| *r > end));
        if let Some(end) = ended {
            revisions.insert(*end);
        }
    }
    revisions.into_iter().collect()
}

/// An etcd client's error in words for people: what happened to the call (etcd does not
/// answer, did not answer in time, refused this replica's access, ...) and the deepest
/// cause the library gives (`connection refused`), never the library's own dump.
pub fn words(e: &switchyard_etcd::Error) -> String {
    use tonic::Code;
    let root = |e: &dyn std::error::Error| {
        let mut deepest = e.to_string();
        let mut next = e.source();
        while let Some(cause) = next {
            deepest = cause.to_string();
            next = cause.source();
        }
        deepest
    };
    match e {
        switchyard_etcd::Error::GRpcStatus(status) => {
            let said = status.message().trim();
            let cause = std::error::Error::source(status)
                .map(root)
                .filter(|c| !c.is_empty())
                // The deepest cause is the message's last clause.
                .unwrap_or_else(|| said.rsplit(": ").next().unwrap_or(said).to_string());
            let cause = lowercase_first(&cause);
            match status.code() {
                Code::Unavailable => format!("etcd does not answer ({cause})"),
                Code::DeadlineExceeded => "etcd did not answer in time".to_string(),
                Code::PermissionDenied | Code::Unauthenticated => {
                    format!("etcd refused this access ({cause})")
                }
                // tonic's request timeout ends a call as cancelled, "Timeout expired".
                Code::Cancelled if said.to_lowercase().contains("timeout") => {
                    "etcd did not answer in time".to_string()
                }
                Code::Cancelled => "the call to etcd was cancelled".to_string(),
                Code::ResourceExhausted => format!("etcd refused a request this large ({cause})"),
                _ if said.is_empty() => format!("etcd answered: {}", status.code().description()),
                _ => format!("etcd answered: {said}"),
            }
        }
        switchyard_etcd::Error::TransportError(t) => {
            format!("etcd does not answer ({})", lowercase_first(&root(t)))
        }
        switchyard_etcd::Error::InvalidArgs(text) => text.clone(),
        other => other.to_string(),
    }
}

/// `text` with its first letter in lower case, for the middle of a sentence.
fn lowercase_first(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_lowercase().chain(chars).collect(),
        None => String::new(),
    }
}

#[cfg(test)]
mod words_tests {
    use super::words;

    /// etcd's errors read as words for people, the deepest cause kept, no library dump.
    #[test]
    fn etcd_errors_are_said_in_words() {
        let refused = switchyard_etcd::Error::GRpcStatus(tonic::Status::unavailable(
            "error trying to connect: tcp connect error: Connection refused (os error 111)",
        ));
        assert_eq!(
            words(&refused),
            "etcd does not answer (connection refused (os error 111))"
        );
        let late = switchyard_etcd::Error::GRpcStatus(tonic::Status::deadline_exceeded("x"));
        assert_eq!(words(&late), "etcd did not answer in time");
        let timed_out =
            switchyard_etcd::Error::GRpcStatus(tonic::Status::cancelled("Timeout expired"));
        assert_eq!(words(&timed_out), "etcd did not answer in time");
        let denied = switchyard_etcd::Error::GRpcStatus(tonic::Status::permission_denied(
            "etcdserver: permission denied",
        ));
        assert_eq!(
            words(&denied),
            "etcd refused this access (permission denied)"
        );
        let other = switchyard_etcd::Error::InvalidArgs("no answer within 5s".into());
        assert_eq!(words(&other), "no answer within 5s");
    }
}

#[cfg(test)]
mod tests {
    /// The apply note is one type: what `apply` writes reads back whole, field for field;
    /// a note of an older apply (fewer fields) and of a newer one (more) read too.
    #[test]
    fn the_apply_note_written_is_the_note_read() {
        let note = super::ApplyNote {
            read_at: Some(41),
            documents: Some(3),
            at: "2026-12-07T01:00:00Z".into(),
            author: Some("ana".into()),
            message: Some("slower connects".into()),
            rollback: Some(12),
            now: true,
            nonce: "123-456".into(),
        };
        let read: super::ApplyNote = serde_json::from_str(&note.text()).expect("reads");
        assert_eq!(read, note);
        let older: super::ApplyNote =
            serde_json::from_str(r#"{"at":"2026-12-01T00:00:00Z","author":"bo"}"#).expect("reads");
        assert_eq!((older.author.as_deref(), older.read_at), (Some("bo"), None));
        let newer: super::ApplyNote =
            serde_json::from_str(r#"{"at":"x","nonce":"n","ticket":"OPS-1"}"#).expect("reads");
        assert_eq!(newer.nonce, "n");
    }

    /// A switch's transactions are one change to readers, at its end; one not ended yet is
    /// no change; edits before and after stay as they were.
    #[test]
    fn a_switch_is_one_change_at_its_end() {
        let revisions = [3, 7, 8, 9, 10, 14, 20, 21].into_iter().collect();
        assert_eq!(
            super::as_readers_saw(revisions, &[(7, Some(11)), (20, None)]),
            [3, 11, 14]
        );
    }
}
