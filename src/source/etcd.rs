//! Reading snapshot documents from etcd: every key under the prefix, at one revision, in one
//! range request (etcd's `Range` is a consistent read of one revision).
//!
//! Must not: retry or watch on its own (the caller decides), or parse documents.

use std::time::Duration;

use etcd_client::{Client, ConnectOptions, GetOptions};

use super::{EtcdUrl, Snapshot, SourceError};
use crate::config::Document;

/// The name a document goes by in errors: `etcd:` and its key.
pub fn document_name(key: &str) -> String {
    format!("etcd:{key}")
}

/// Connect to the members of `url`, each try bounded by `timeout`.
pub async fn connect(url: &EtcdUrl, timeout: Duration) -> Result<Client, SourceError> {
    let options = ConnectOptions::new()
        .with_connect_timeout(timeout)
        .with_timeout(timeout);
    Client::connect(&url.endpoints, Some(options))
        .await
        .map_err(|e| SourceError::Unavailable {
            url: url.display(),
            message: format!("cannot connect: {e}"),
        })
}

/// Every document under the prefix, read at one revision.
pub async fn read(client: &mut Client, url: &EtcdUrl) -> Result<Snapshot, SourceError> {
    let unavailable = |message: String| SourceError::Unavailable {
        url: url.display(),
        message,
    };
    let prefix = url.key_prefix();
    let response = client
        .get(prefix.as_str(), Some(GetOptions::new().with_prefix()))
        .await
        .map_err(|e| unavailable(format!("cannot read the prefix {prefix:?}: {e}")))?;
    let revision = response.header().map_or(0, |h| h.revision());
    let mut documents = Vec::new();
    for kv in response.kvs() {
        let key = String::from_utf8_lossy(kv.key()).into_owned();
        let name = &key[prefix.len().min(key.len())..];
        // Switchyard's own keys (`.switchyard/...`), and the prefix key itself, are not
        // documents.
        if name.is_empty() || name.split('/').any(|part| part.starts_with('.')) {
            continue;
        }
        let text = match std::str::from_utf8(kv.value()) {
            Ok(text) => text.to_string(),
            Err(e) => {
                return Err(unavailable(format!(
                    "the document at key {key:?} is not UTF-8 text ({e})"
                )))
            }
        };
        documents.push(Document {
            name: document_name(&key),
            text,
        });
    }
    Ok(Snapshot {
        revision,
        documents,
    })
}
