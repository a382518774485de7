//! The fleet's rollout in etcd (`serve --source` with a canary policy): its state, every
//! replica's verdict on a lease, and the copy of the promoted generation's documents.
//!
//! The keys sit beside the documents' prefix, not under it, so that an apply's guard (no key
//! under the prefix written since it read) and the documents' watch never see them, while an
//! etcd role granted the prefix (`/switchyard`, as a prefix) covers them too:
//! - `PREFIX.rollout/state`: the state ([`FleetState`], JSON);
//! - `PREFIX.rollout/replicas/ID`: a replica's [`Verdict`] (JSON), on its lease;
//! - `PREFIX.rollout/bake`: the candidate's content version while it bakes, on a lease as
//!   long as the bake: etcd deletes it when the bake is over (no replica's clock says so);
//! - `PREFIX.stable/REVISION/NAME`: the promoted generation's documents (`NAME` as under the
//!   prefix), written before the state names them, so a copy the state names is whole.
//!
//! Must not: decide anything (`rollout::fleetwide`) or follow the state (`driver`).

use std::collections::BTreeMap;

use switchyard_etcd::{
    Client, Compare, CompareOp, GetOptions, PutOptions, Txn, TxnOp, TxnOpResponse,
};

use crate::config::Document;
use crate::rollout::fleetwide::{FleetState, Verdict};
use crate::source::etcd::{document_name, keys};
use crate::source::{EtcdUrl, SourceError};

/// Puts per transaction when copying documents (etcd refuses more than 128 operations in
/// one by default), and bytes (its requests are at most 1.5 MiB by default).
const COPY_OPS: usize = 64;
const COPY_BYTES: usize = 1 << 20;

/// The rollout as etcd holds it, read at one revision.
#[derive(Clone, Debug, Default)]
pub struct Held {
    pub shared: Option<FleetState>,
    /// The state key's last modification (0: none): what a write compares.
    pub modified: i64,
    /// Each replica's verdict, by replica.
    pub verdicts: BTreeMap<String, Verdict>,
    /// The content version baking (the bake key's value), while its lease lasts.
    pub baking: Option<String>,
    /// The revision this was read at: a watch goes on from the next.
    pub revision: i64,
}

fn unavailable(url: &EtcdUrl, message: String) -> SourceError {
    SourceError::Unavailable {
        url: url.display(),
        message,
    }
}

/// The state, every verdict and the bake, at one revision (one transaction of three reads).
pub async fn read(client: &mut Client, url: &EtcdUrl) -> Result<Held, SourceError> {
    let txn = Txn::new().and_then(vec![
        TxnOp::get(keys::rollout_state(url), None),
        TxnOp::get(keys::verdicts(url), Some(GetOptions::new().with_prefix())),
        TxnOp::get(keys::bake(url), None),
    ]);
    let response = client.txn(txn).await.map_err(|e| {
        unavailable(
            url,
            format!(
                "cannot read the rollout: {}",
                crate::source::etcd::words(&e)
            ),
        )
    })?;
    let mut held = Held {
        revision: response.header().map_or(0, |h| h.revision()),
        ..Held::default()
    };
    let mut answers = response.op_responses().into_iter();
    if let Some(TxnOpResponse::Get(state)) = answers.next() {
        if let Some(kv) = state.kvs().first() {
            held.modified = kv.mod_revision();
            held.shared = Some(decode_state(url, kv.value())?);
        }
    }
    if let Some(TxnOpResponse::Get(verdicts)) = answers.next() {
        for kv in verdicts.kvs() {
            let (Some(replica), Ok(verdict)) = (
                replica_of(url, kv.key()),
                serde_json::from_slice::<Verdict>(kv.value()),
            ) else {
                continue;
            };
            held.verdicts.insert(replica, verdict);
        }
    }
    if let Some(TxnOpResponse::Get(bake)) = answers.next() {
        held.baking = bake
            .kvs()
            .first()
            .map(|kv| String::from_utf8_lossy(kv.value()).into_owned());
    }
    Ok(held)
}

/// Begin the bake of candidate `version`: the bake key on a lease of `bake` (whole seconds,
/// rounded up; etcd may lengthen a lease, never shorten it), which nobody renews. A bake
/// shorter than a second needs no key: it is over at once.
pub async fn begin_bake(
    client: &mut Client,
    url: &EtcdUrl,
    version: &str,
    bake: std::time::Duration,
) -> Result<(), SourceError> {
    if bake < std::time::Duration::from_secs(1) {
        return Ok(());
    }
    let seconds = bake.as_secs() + u64::from(bake.subsec_nanos() > 0);
    let failed = |e: switchyard_etcd::Error| {
        unavailable(
            url,
            format!("cannot begin the bake: {}", crate::source::etcd::words(&e)),
        )
    };
    let lease = client
        .lease_grant(i64::try_from(seconds).unwrap_or(i64::MAX))
        .await
        .map_err(failed)?
        .id();
    client
        .put(
            keys::bake(url),
            version,
            Some(PutOptions::new().with_lease(lease)),
        )
        .await
        .map_err(failed)?;
    Ok(())
}

/// The state in a value: a state that does not read is an error naming the key (it is
/// written only by Switchyard; a hand edit that breaks it must not be taken as none).
pub fn decode_state(url: &EtcdUrl, value: &[u8]) -> Result<FleetState, SourceError> {
    serde_json::from_slice(value).map_err(|e| SourceError::Corrupt {
        url: url.display(),
        what: format!(
            "the rollout state at {} does not read ({e}); delete the key to start over \
             from the documents as they are",
            keys::rollout_state(url)
        ),
    })
}

/// The replica a verdict key is about.
pub fn replica_of(url: &EtcdUrl, key: &[u8]) -> Option<String> {
    let key = std::str::from_utf8(key).ok()?;
    key.strip_prefix(&keys::verdicts(url))
        .filter(|r| !r.is_empty())
        .map(str::to_string)
}

/// Write `next` if the state is still what was read (`modified`, 0: none yet). The state's
/// new modification revision, or `None` when another replica wrote first.
pub async fn write_state(
    client: &mut Client,
    url: &EtcdUrl,
    next: &FleetState,
    modified: i64,
) -> Result<Option<i64>, SourceError> {
    let key = keys::rollout_state(url);
    let value = serde_json::to_string(next)
        .map_err(|e| unavailable(url, format!("cannot write the rollout: {e}")))?;
    let txn = Txn::new()
        .when(vec![Compare::mod_revision(
            key.as_str(),
            CompareOp::Equal,
            modified,
        )])
        .and_then(vec![TxnOp::put(key.as_str(), value, None)]);
    let response = client.txn(txn).await.map_err(|e| {
        unavailable(
            url,
            format!(
                "cannot write the rollout: {}",
                crate::source::etcd::words(&e)
            ),
        )
    })?;
    Ok(response
        .succeeded()
        .then(|| response.header().map_or(0, |h| h.revision())))
}

/// Copy the documents of the generation read at `revision` beside the state, in
/// transactions within etcd's default limits. Writing the same copy twice (two replicas
/// promoting at once) writes the same values.
pub async fn copy_stable(
    client: &mut Client,
    url: &EtcdUrl,
    revision: i64,
    documents: &[Document],
) -> Result<(), SourceError> {
    let prefix = url.key_prefix();
    let into = keys::stable(url, revision);
    let mut batch = Vec::new();
    let mut bytes = 0;
    for (i, document) in documents.iter().enumerate() {
        let name = document
            .name
            .strip_prefix("etcd:")
            .and_then(|key| key.strip_prefix(prefix.as_str()))
            .unwrap_or(&document.name);
        bytes += document.bytes().len() + into.len() + name.len();
        batch.push(TxnOp::put(
            format!("{into}{name}"),
            document.bytes().to_vec(),
            None,
        ));
        let last = i + 1 == documents.len();
        if batch.len() >= COPY_OPS || bytes >= COPY_BYTES || last {
            client
                .txn(Txn::new().and_then(std::mem::take(&mut batch)))
                .await
                .map_err(|e| {
                    unavailable(
                        url,
                        format!(
                            "cannot copy the promoted documents: {}",
                            crate::source::etcd::words(&e)
                        ),
                    )
                })?;
            bytes = 0;
        }
    }
    Ok(())
}

/// The copy of the documents promoted at `revision`, named as they were under the prefix.
pub async fn read_copy(
    client: &mut Client,
    url: &EtcdUrl,
    revision: i64,
) -> Result<Vec<Document>, SourceError> {
    let from = keys::stable(url, revision);
    let response = crate::source::etcd::reader(client)
        .get(from.as_str(), Some(GetOptions::new().with_prefix()))
        .await
        .map_err(|e| {
            unavailable(
                url,
                format!(
                    "cannot read the promoted documents: {}",
                    crate::source::etcd::words(&e)
                ),
            )
        })?;
    let mut documents = Vec::new();
    for kv in response.kvs() {
        let key = String::from_utf8_lossy(kv.key());
        let name = key.get(from.len()..).unwrap_or_default();
        documents.push(Document::from_bytes(
            document_name(&format!("{}{name}", url.key_prefix())),
            kv.value().to_vec(),
        ));
    }
    Ok(documents)
}

/// Remove every copy but the one of `keep` (older promotions, and copies left by a replica
/// that stopped before it wrote the state).
pub async fn drop_copies(client: &mut Client, url: &EtcdUrl, keep: i64) -> Result<(), SourceError> {
    let all = keys::stables(url);
    let response = client
        .get(
            all.as_str(),
            Some(GetOptions::new().with_prefix().with_keys_only()),
        )
        .await
        .map_err(|e| {
            unavailable(
                url,
                format!(
                    "cannot list the promoted copies: {}",
                    crate::source::etcd::words(&e)
                ),
            )
        })?;
    let mut revisions = std::collections::BTreeSet::new();
    for kv in response.kvs() {
        let key = String::from_utf8_lossy(kv.key());
        if let Some(revision) = key
            .get(all.len()..)
            .and_then(|rest| rest.split('/').next())
            .and_then(|r| r.parse::<i64>().ok())
            .filter(|r| *r != keep)
        {
            revisions.insert(revision);
        }
    }
    for revision in revisions {
        client
            .delete(
                keys::stable(url, revision),
                Some(switchyard_etcd::DeleteOptions::new().with_prefix()),
            )
            .await
            .map_err(|e| {
                unavailable(
                    url,
                    format!(
                        "cannot remove an old copy: {}",
                        crate::source::etcd::words(&e)
                    ),
                )
            })?;
    }
    Ok(())
}

/// Why a verdict was not written.
#[derive(Debug, thiserror::Error)]
pub enum VerdictNotWritten {
    /// etcd no longer has the lease: the verdict goes on a new one.
    #[error("cannot write a verdict: {0}")]
    LeaseGone(crate::source::etcd::lease::Lapsed),
    /// etcd did not take it (it may answer again in a moment).
    #[error(transparent)]
    Failed(#[from] SourceError),
}

/// Write this replica's verdict on its lease (of `ttl` seconds: a lapse is said as one).
pub async fn put_verdict(
    client: &mut Client,
    url: &EtcdUrl,
    replica: &str,
    verdict: &Verdict,
    (lease, ttl): (i64, i64),
) -> Result<(), VerdictNotWritten> {
    let value = serde_json::to_string(verdict)
        .map_err(|e| unavailable(url, format!("cannot write a verdict: {e}")))?;
    let written = client
        .put(
            format!("{}{replica}", keys::verdicts(url)),
            value,
            Some(PutOptions::new().with_lease(lease)),
        )
        .await;
    match written {
        Ok(_) => Ok(()),
        Err(e) if crate::source::etcd::lease::gone(&e) => Err(VerdictNotWritten::LeaseGone(
            crate::source::etcd::lease::Lapsed::Ended {
                what: "the verdict's lease",
                ttl,
            },
        )),
        Err(e) => Err(unavailable(
            url,
            format!("cannot write a verdict: {}", crate::source::etcd::words(&e)),
        )
        .into()),
    }
}
