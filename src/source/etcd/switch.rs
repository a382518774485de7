//! An apply too large for one etcd transaction (etcd's defaults: 128 operations and 1.5 MiB a
//! request), still whole for every reader: the prefix is switched over.
//!
//! 1. **Stage.** The documents to put are written under `PREFIX.staging/ID/` (beside the
//!    prefix: no reader looks there), in transactions within the limits, with
//!    `PREFIX.staging/ID/.alive` on this apply's lease.
//! 2. **Begin.** One transaction, guarded as a one-transaction apply is (no key under the
//!    prefix written since the read, no other apply since), writes the switch key
//!    `PREFIX/.switchyard/switching` ([`Switch`]: the keys to delete, the apply's note). From
//!    then on every reader holds: a read of the prefix reads it as it was before the switch
//!    key (`etcd::read_at`), and a follower loads nothing while the key is there.
//! 3. **Copy.** The documents go under the prefix and the deleted keys go, in transactions
//!    that each first check the switch key is still this one.
//! 4. **End.** One transaction deletes the switch key and writes the apply's guard key with
//!    its note: readers load the whole change, at that revision.
//! 5. The staged documents are deleted.
//!
//! A failure before the switch key is written deletes what was staged: nothing changed. After
//! it, each step is tried again until the deadline (the steps are idempotent). An apply that
//! stops mid-way (killed, or out of time) leaves the switch key and the staged documents; the
//! next apply finishes it first ([`resume`]), while readers serve what the prefix held before
//! it. A staging left by an apply killed before its switch began is deleted by the next apply
//! (its `.alive` key went with its lease; an apply waits for a live one, up to its lease).
//!
//! Must not: decide what changes (`apply` does), or read documents for serving.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use switchyard_etcd::{
    Client, Compare, CompareOp, DeleteOptions, GetOptions, PutOptions, Txn, TxnOp,
};

use super::{keys, refused, ApplyError, Change, ReadAt, RETRY};
use crate::source::{EtcdUrl, SourceError};

/// Operations and bytes in one transaction of a switch (etcd's defaults are 128 and 1.5
/// MiB): a change that fits them with its guard is applied in one transaction instead.
pub const BATCH_OPS: usize = 100;
pub const BATCH_BYTES: usize = 1 << 20;

/// How long the lease of an apply's `.alive` key lasts without being renewed.
pub const ALIVE_TTL: i64 = 10;
/// How long a renewal of it may take.
const RENEW_TIMEOUT: Duration = Duration::from_secs(5);
/// How often an apply waiting for another's switch looks again.
const BUSY_POLL: Duration = Duration::from_millis(500);

/// What the switch key holds: which apply, the keys it deletes, how many documents it
/// staged, and its note (the guard key's value once it ends).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Switch {
    pub id: String,
    pub delete: Vec<String>,
    pub puts: usize,
    pub note: String,
}

fn unavailable(url: &EtcdUrl, message: String) -> ApplyError {
    ApplyError::Unavailable(SourceError::Unavailable {
        url: url.display(),
        message,
    })
}

/// An etcd error as an apply says it: refused for sure, or unavailable.
fn failed(url: &EtcdUrl, what: &str, e: &switchyard_etcd::Error) -> ApplyError {
    refused(e)
        .unwrap_or_else(|| unavailable(url, format!("{what}: {}", crate::source::etcd::words(e))))
}

/// The transactions `ops` go in, within [`BATCH_OPS`] and [`BATCH_BYTES`] each (by the
/// sizes `sizes` gives).
fn batches<T>(items: &[T], size: impl Fn(&T) -> usize) -> Vec<&[T]> {
    let mut out = Vec::new();
    let (mut start, mut bytes) = (0, 0);
    for (i, item) in items.iter().enumerate() {
        let this = size(item);
        if i > start && (i - start >= BATCH_OPS || bytes + this > BATCH_BYTES) {
            out.push(&items[start..i]);
            start = i;
            bytes = 0;
        }
        bytes += this;
    }
    if start < items.len() {
        out.push(&items[start..]);
    }
    out
}

/// This apply's lease, kept alive by a task of its own while the apply goes on
/// (`lease::Kept`): its `.alive` key says the apply is alive.
struct Alive {
    lease: i64,
    kept: super::lease::Kept,
}

impl Alive {
    /// A lease of [`ALIVE_TTL`] for this apply, and its keeper.
    async fn take(client: &mut Client, url: &EtcdUrl) -> Result<Alive, ApplyError> {
        let granted = tokio::time::Instant::now();
        let lease = client
            .lease_grant(ALIVE_TTL)
            .await
            .map_err(|e| failed(url, "cannot take a lease", &e))?
            .id();
        let kept = super::lease::Kept::spawn(
            client.clone(),
            lease,
            ALIVE_TTL,
            granted,
            RENEW_TIMEOUT,
            "this apply's lease",
        );
        Ok(Alive { lease, kept })
    }
}

/// Apply `change` by switching (see the module doc), guarded by what was read at `at`; the
/// revision it landed at.
pub async fn apply(
    client: &mut Client,
    url: &EtcdUrl,
    change: &Change,
    at: ReadAt,
    note: &str,
    deadline: tokio::time::Instant,
) -> Result<i64, ApplyError> {
    let id = format!(
        "{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
    );
    let mut alive = within(
        deadline,
        url,
        "cannot take a lease",
        Alive::take(client, url),
    )
    .await?;
    let staged = within(
        deadline,
        url,
        "cannot stage the documents",
        stage(client, url, &id, change, &mut alive),
    )
    .await;
    let begun = match staged {
        Ok(()) => match within(
            deadline,
            url,
            "cannot begin the switch",
            begin(client, url, &id, change, at, note),
        )
        .await
        {
            // Out of time as the switch key was written: whether it was, the key says
            // (one more look, however late).
            Err(late) => match tokio::time::timeout(CLEANUP, began(client, url, &id)).await {
                Ok(Some(begun)) => Ok(begun),
                _ => Err(late),
            },
            begun => begun,
        },
        Err(e) => Err(e),
    };
    let (text, switch) = match begun {
        Ok(begun) => begun,
        Err(e) => {
            // Nothing under the prefix changed: what was staged goes (its lease ends anyway).
            let _ = tokio::time::timeout(CLEANUP, async {
                let _ = drop_staging(client, url, &id).await;
                let _ = client.lease_revoke(alive.lease).await;
            })
            .await;
            return Err(e);
        }
    };
    let landed = finish(client, url, &text, &switch, &change.put, deadline).await;
    let _ = tokio::time::timeout(CLEANUP, async {
        if landed.is_ok() {
            let _ = drop_staging(client, url, &id).await;
        }
        let _ = client.lease_revoke(alive.lease).await;
    })
    .await;
    landed
}

/// How long the tidying after an apply may take past its deadline (dropping a staging,
/// revoking a lease: what is left is given up by etcd within the lease, or by the next
/// apply).
const CLEANUP: Duration = Duration::from_secs(1);

/// `step` of an apply, within its `deadline`: past it, etcd did not answer in time
/// (`what` says what could not be done).
async fn within<T>(
    deadline: tokio::time::Instant,
    url: &EtcdUrl,
    what: &str,
    step: impl std::future::Future<Output = Result<T, ApplyError>>,
) -> Result<T, ApplyError> {
    tokio::time::timeout_at(deadline, step)
        .await
        .unwrap_or_else(|_| {
            Err(unavailable(
                url,
                format!("{what}: etcd did not answer within --source-timeout"),
            ))
        })
}

/// The switch this apply (`id`) began, if the switch key holds it.
async fn began(client: &mut Client, url: &EtcdUrl, id: &str) -> Option<(String, Switch)> {
    let got = client.get(keys::switching(url), None).await.ok()?;
    let text = String::from_utf8_lossy(got.kvs().first()?.value()).into_owned();
    let switch: Switch = serde_json::from_str(&text).ok()?;
    (switch.id == id).then_some((text, switch))
}

/// Write the documents to put under the staging keys, and the `.alive` key on the lease.
async fn stage(
    client: &mut Client,
    url: &EtcdUrl,
    id: &str,
    change: &Change,
    alive: &mut Alive,
) -> Result<(), ApplyError> {
    let into = super::keys::staging(url, id);
    client
        .put(
            format!("{into}.alive"),
            "",
            Some(PutOptions::new().with_lease(alive.lease)),
        )
        .await
        .map_err(|e| failed(url, "cannot stage the documents", &e))?;
    let prefix = url.key_prefix();
    for batch in batches(&change.put, |(k, v)| k.len() + v.len() + into.len()) {
        let ops: Vec<TxnOp> = batch
            .iter()
            .map(|(key, text)| {
                let name = key.strip_prefix(prefix.as_str()).unwrap_or(key);
                TxnOp::put(format!("{into}{name}"), text.as_str(), None)
            })
            .collect();
        client
            .txn(Txn::new().and_then(ops))
            .await
            .map_err(|e| failed(url, "cannot stage the documents", &e))?;
        // Lapsed, another apply may take this staging for abandoned and drop it: stop
        // before the switch begins (nothing under the prefix changed).
        if let Some(lapsed) = alive.kept.lapsed() {
            return Err(ApplyError::Unavailable(SourceError::Unavailable {
                url: url.display(),
                message: format!("cannot stage the documents: {lapsed}"),
            }));
        }
    }
    Ok(())
}

/// Write the switch key, guarded as a one-transaction apply is. The key's text and what it
/// says.
async fn begin(
    client: &mut Client,
    url: &EtcdUrl,
    id: &str,
    change: &Change,
    at: ReadAt,
    note: &str,
) -> Result<(String, Switch), ApplyError> {
    let switch = Switch {
        id: id.to_string(),
        delete: change.delete.clone(),
        puts: change.put.len(),
        note: note.to_string(),
    };
    let text = serde_json::to_string(&switch)
        .map_err(|e| unavailable(url, format!("cannot write the switch key: {e}")))?;
    let prefix = url.key_prefix();
    let guard = keys::guard(url);
    let txn = Txn::new()
        .when(vec![
            Compare::mod_revision(prefix.as_str(), CompareOp::Less, at.revision + 1).with_prefix(),
            Compare::mod_revision(guard.as_str(), CompareOp::Equal, at.guard),
        ])
        .and_then(vec![TxnOp::put(keys::switching(url), text.as_str(), None)]);
    match client.txn(txn).await {
        Ok(answer) if answer.succeeded() => Ok((text, switch)),
        Ok(_) => Err(ApplyError::Changed { read: at.revision }),
        Err(e) => {
            // Whether it landed: the key says.
            match client.get(keys::switching(url), None).await {
                Ok(got)
                    if got
                        .kvs()
                        .first()
                        .is_some_and(|kv| kv.value() == text.as_bytes()) =>
                {
                    Ok((text, switch))
                }
                _ => Err(failed(url, "cannot begin the switch", &e)),
            }
        }
    }
}

/// Copy the documents under the prefix, delete what goes, and end the switch: each
/// transaction checks the switch key is still `text`, and is tried again while etcd fails
/// to answer, until `deadline`. The revision of the end.
async fn finish(
    client: &mut Client,
    url: &EtcdUrl,
    text: &str,
    switch: &Switch,
    puts: &[(String, String)],
    deadline: tokio::time::Instant,
) -> Result<i64, ApplyError> {
    let ours = || Compare::value(keys::switching(url), CompareOp::Equal, text);
    // The documents, then the keys to delete, in transactions within the limits.
    let writes: Vec<(&str, Option<&str>)> = puts
        .iter()
        .map(|(key, text)| (key.as_str(), Some(text.as_str())))
        .chain(switch.delete.iter().map(|key| (key.as_str(), None)))
        .collect();
    for batch in batches(&writes, |(k, v)| k.len() + v.map_or(0, str::len)) {
        let ops = || {
            batch
                .iter()
                .map(|(key, text)| match text {
                    Some(text) => TxnOp::put(*key, *text, None),
                    None => TxnOp::delete(*key, None),
                })
                .collect::<Vec<_>>()
        };
        step(
            client,
            || Txn::new().when(vec![ours()]).and_then(ops()),
            deadline,
        )
        .await?;
    }
    let end = || {
        Txn::new().when(vec![ours()]).and_then(vec![
            TxnOp::delete(keys::switching(url), None),
            TxnOp::put(keys::guard(url), switch.note.as_str(), None),
        ])
    };
    match step(client, end, deadline).await {
        Ok(revision) => Ok(revision),
        // The end landed and its answer was lost: the guard key holds this apply's note.
        Err(ApplyError::Switched) => {
            let got = tokio::time::timeout(CLEANUP, client.get(keys::guard(url), None))
                .await
                .map_err(|_| unavailable(url, "cannot read the guard key: no answer".into()))?
                .map_err(|e| failed(url, "cannot read the guard key", &e))?;
            match got.kvs().first() {
                Some(kv) if kv.value() == switch.note.as_bytes() => Ok(kv.mod_revision()),
                _ => Err(ApplyError::Switched),
            }
        }
        Err(e) => Err(e),
    }
}

/// One transaction of a switch, tried again while etcd fails to answer: its revision, or
/// [`ApplyError::Switched`] when the switch key is no longer this one.
async fn step(
    client: &mut Client,
    txn: impl Fn() -> Txn,
    deadline: tokio::time::Instant,
) -> Result<i64, ApplyError> {
    loop {
        let Ok(answered) = tokio::time::timeout_at(deadline, client.txn(txn())).await else {
            return Err(ApplyError::HalfSwitched {
                message: "etcd did not answer within --source-timeout".into(),
            });
        };
        match answered {
            Ok(answer) if answer.succeeded() => {
                return Ok(answer.header().map_or(0, |h| h.revision()))
            }
            Ok(_) => return Err(ApplyError::Switched),
            Err(e) => {
                if let Some(refused) = refused(&e) {
                    return Err(refused);
                }
                if tokio::time::Instant::now() + RETRY >= deadline {
                    return Err(ApplyError::HalfSwitched {
                        message: crate::source::etcd::words(&e),
                    });
                }
                tokio::time::sleep(RETRY).await;
            }
        }
    }
}

/// Delete the staged documents of apply `id`.
async fn drop_staging(
    client: &mut Client,
    url: &EtcdUrl,
    id: &str,
) -> Result<(), switchyard_etcd::Error> {
    client
        .delete(
            super::keys::staging(url, id),
            Some(DeleteOptions::new().with_prefix()),
        )
        .await
        .map(|_| ())
}

/// Before an apply: finish a switch an earlier apply began and did not end (its revision),
/// or refuse while that apply is still alive; and delete stagings of applies that died
/// before their switch began.
pub async fn resume(
    client: &mut Client,
    url: &EtcdUrl,
    deadline: tokio::time::Instant,
) -> Result<Option<i64>, ApplyError> {
    // An apply switching now is waited for within the caller's deadline, which the read
    // and the write after this share: one stopped mid-way is given up by etcd within
    // ALIVE_TTL, so a deadline past that always sees it end.
    let mut said = false;
    loop {
        let once = within(
            deadline,
            url,
            "cannot look for an interrupted apply",
            resume_once(client, url, deadline),
        );
        match once.await {
            Err(ApplyError::Busy) if tokio::time::Instant::now() + BUSY_POLL < deadline => {
                if !std::mem::replace(&mut said, true) {
                    eprintln!(
                        "waiting: another apply is switching the prefix over (or stopped \
                         mid-way less than {ALIVE_TTL} s ago)"
                    );
                }
                tokio::time::sleep(BUSY_POLL).await;
            }
            // A member lost, a leader being elected: a moment's unavailability, asked again
            // until the deadline (as the apply's read is).
            Err(ApplyError::Unavailable(e))
                if e.is_transient() && tokio::time::Instant::now() + RETRY < deadline =>
            {
                tokio::time::sleep(RETRY).await;
            }
            done => return done,
        }
    }
}

/// One look at [`resume`]'s work.
async fn resume_once(
    client: &mut Client,
    url: &EtcdUrl,
    deadline: tokio::time::Instant,
) -> Result<Option<i64>, ApplyError> {
    let got = client
        .get(keys::switching(url), None)
        .await
        .map_err(|e| failed(url, "cannot start the apply", &e))?;
    let begun = got.kvs().first().map(|kv| kv.value().to_vec());
    let switch: Option<(String, Switch)> = match begun {
        None => None,
        Some(value) => {
            let text = String::from_utf8_lossy(&value).into_owned();
            let switch = serde_json::from_str(&text).map_err(|e| SourceError::Corrupt {
                url: url.display(),
                what: format!(
                    "the switch key {} does not read ({e}); delete it to give the \
                     interrupted apply up",
                    keys::switching(url)
                ),
            })?;
            Some((text, switch))
        }
    };
    let listed = client
        .get(
            super::keys::stagings(url),
            Some(GetOptions::new().with_prefix().with_keys_only()),
        )
        .await
        .map_err(|e| failed(url, "cannot list the stagings", &e))?;
    let root = super::keys::stagings(url);
    let mut ids = std::collections::BTreeMap::<String, bool>::new();
    for kv in listed.kvs() {
        let key = String::from_utf8_lossy(kv.key());
        let Some((id, name)) = key.get(root.len()..).and_then(|rest| rest.split_once('/')) else {
            continue;
        };
        *ids.entry(id.to_string()).or_default() |= name == ".alive";
    }
    // An apply staging or switching now, or one stopped less than its lease ago: waited
    // for ([`resume`]), so that what it leaves is finished or deleted here.
    if ids.values().any(|alive| *alive) {
        return Err(ApplyError::Busy);
    }
    for id in ids.keys() {
        if switch.as_ref().is_none_or(|(_, s)| s.id != *id) {
            let _ = drop_staging(client, url, id).await;
        }
    }
    let Some((text, switch)) = switch else {
        return Ok(None);
    };
    let from = super::keys::staging(url, &switch.id);
    let staged = super::reader(client)
        .get(from.as_str(), Some(GetOptions::new().with_prefix()))
        .await
        .map_err(|e| failed(url, "cannot read the staged documents", &e))?;
    let prefix = url.key_prefix();
    let puts: Vec<(String, String)> = staged
        .kvs()
        .iter()
        .filter_map(|kv| {
            let key = String::from_utf8_lossy(kv.key());
            let name = key.get(from.len()..)?;
            (name != ".alive").then(|| {
                (
                    format!("{prefix}{name}"),
                    String::from_utf8_lossy(kv.value()).into_owned(),
                )
            })
        })
        .collect();
    if puts.len() != switch.puts {
        return Err(ApplyError::Unavailable(SourceError::Corrupt {
            url: url.display(),
            what: format!(
                "an interrupted apply staged {} of its {} documents under {from}: it cannot be \
                 finished; delete {} to give it up (the prefix serves what it held before it)",
                puts.len(),
                switch.puts,
                keys::switching(url)
            ),
        }));
    }
    // Held (its lease kept alive) until the switch ends.
    let alive = Alive::take(client, url).await?;
    let landed = finish(client, url, &text, &switch, &puts, deadline).await;
    let _ = client.lease_revoke(alive.lease).await;
    let landed = landed?;
    let _ = drop_staging(client, url, &switch.id).await;
    Ok(Some(landed))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Batches stay within the operations and the bytes of one transaction, in order, with
    /// nothing lost; one item over the bytes goes alone (etcd refuses it, and says so).
    #[test]
    fn batches_keep_within_a_transaction_and_lose_nothing() {
        let items: Vec<usize> = (0..1_000).map(|i| (i * 7919) % 40_000).collect();
        let out = batches(&items, |n| *n);
        assert_eq!(out.concat(), items);
        for b in &out {
            assert!(b.len() <= BATCH_OPS);
            assert!(
                b.len() == 1 || b.iter().sum::<usize>() <= BATCH_BYTES,
                "{}",
                b.len()
            );
        }
        let big = [10, BATCH_BYTES + 1, 10];
        assert_eq!(batches(&big, |n| *n).len(), 3);
        assert!(batches(&[] as &[usize], |n| *n).is_empty());
    }
}
