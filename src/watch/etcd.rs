//! Following an etcd prefix (`serve --source`): a watch from the revision after the last
//! one read, the whole prefix read again at one revision after each burst of changes, and
//! tries that wait longer each time while etcd does not answer.
//!
//! Must not: parse documents (`Reloader::reload_documents` loads them) or read files.

use std::sync::Arc;
use std::time::Duration;

use super::{Reloader, DEBOUNCE, MAX_DEBOUNCE};
use crate::source::{etcd, EtcdUrl, SourceError};

/// How long one connect or read of etcd may take.
const ETCD_TIMEOUT: Duration = Duration::from_secs(5);
/// The first wait before trying again after a failure, and the longest.
const ETCD_RETRY_FIRST: Duration = Duration::from_millis(500);
const ETCD_RETRY_MAX: Duration = Duration::from_secs(10);

/// Follow an etcd prefix (`serve --source`) from `revision`, the one first loaded: watch from
/// the next; after each burst of changes (a transaction's events come together), read the
/// whole prefix again at one revision and reload from it, so a transaction is one
/// generation. After a compaction the prefix is read again, and content hashes keep what is
/// unchanged from being sent again. While etcd does not answer, the last good generation
/// keeps serving and the watch resumes from the last revision read, until `shutdown`.
pub async fn follow_etcd(
    reloader: Arc<Reloader>,
    url: EtcdUrl,
    access: etcd::Access,
    mut revision: i64,
    shutdown: impl std::future::Future<Output = ()>,
) {
    tokio::pin!(shutdown);
    reloader.source_health(&url.display(), None);
    let mut retry = ETCD_RETRY_FIRST;
    let mut away = false;
    // Whatever fails (connecting, watching, reading), the next try waits, longer each time
    // up to ETCD_RETRY_MAX: an etcd that is away is never asked in a tight loop.
    let mut failed: Option<SourceError> = None;
    loop {
        if let Some(e) = failed.take() {
            if !away {
                tracing::warn!(error = %e, revision, "etcd does not answer; the last good generation keeps serving, and the watch resumes from the last revision read.");
                reloader.source_health(&url.display(), Some(e.to_string()));
                away = true;
            }
            tokio::select! {
                _ = &mut shutdown => return,
                _ = tokio::time::sleep(retry) => {}
            }
            retry = (retry * 2).min(ETCD_RETRY_MAX);
        }
        let connected = tokio::select! {
            _ = &mut shutdown => return,
            c = etcd::connect(&url, &access, ETCD_TIMEOUT) => c,
        };
        let mut client = match connected {
            Ok(client) => client,
            Err(e) => {
                failed = Some(e);
                continue;
            }
        };
        // One watch at a time, from the revision after the last one read.
        loop {
            let options = etcd_client::WatchOptions::new()
                .with_prefix()
                .with_start_revision(revision + 1);
            let mut watcher = etcd::watcher(&client);
            let watched = tokio::select! {
                _ = &mut shutdown => return,
                w = watcher.watch(url.key_prefix(), Some(options)) => w,
            };
            let mut stream = match watched {
                Ok(stream) => stream,
                Err(e) => {
                    failed = Some(SourceError::Unavailable {
                        url: url.display(),
                        message: format!("cannot watch: {e}"),
                    });
                    break;
                }
            };
            if away {
                tracing::info!(
                    revision,
                    "etcd answers again; watching from the last revision read."
                );
                reloader.source_health(&url.display(), None);
                away = false;
            }
            retry = ETCD_RETRY_FIRST;
            let Some(change) = next_change(&mut stream, &mut shutdown).await else {
                failed = Some(SourceError::Unavailable {
                    url: url.display(),
                    message: "the watch ended".into(),
                });
                break;
            };
            let Some(compacted) = change else {
                return;
            };
            let read = tokio::select! {
                _ = &mut shutdown => return,
                read = tokio::time::timeout(ETCD_TIMEOUT, etcd::read(&mut client, &url)) => read,
            };
            match read {
                Ok(Ok(snapshot)) => {
                    let this = Arc::clone(&reloader);
                    let read_at = snapshot.revision;
                    let documents = snapshot.documents;
                    let _ = tokio::task::spawn_blocking(move || {
                        this.reload_documents(&documents, read_at)
                    })
                    .await;
                    if compacted {
                        tracing::info!(
                            revision = read_at,
                            "etcd compacted past the watch: the prefix was read again."
                        );
                    }
                    revision = read_at;
                }
                Ok(Err(e)) => {
                    failed = Some(e);
                    break;
                }
                Err(_) => {
                    failed = Some(SourceError::Unavailable {
                        url: url.display(),
                        message: "reading the prefix after a change took too long".into(),
                    });
                    break;
                }
            }
        }
    }
}

/// Wait for a burst of changes on the watch, then for quiet ([`DEBOUNCE`], at most
/// [`MAX_DEBOUNCE`]), as for files. `Some(Some(compacted))` after changes (`compacted`: the
/// watch's start was compacted away, so everything must be read again); `Some(None)` when
/// `shutdown` completed; `None` when the watch ended or failed.
async fn next_change(
    stream: &mut etcd_client::WatchStream,
    shutdown: &mut std::pin::Pin<&mut impl std::future::Future<Output = ()>>,
) -> Option<Option<bool>> {
    let compacted = loop {
        let message = tokio::select! {
            _ = shutdown.as_mut() => return Some(None),
            m = stream.message() => m,
        };
        let response = message.ok().flatten()?;
        if response.compact_revision() > 0 {
            break true;
        }
        if response.canceled() {
            return None;
        }
        if !response.events().is_empty() {
            break false;
        }
    };
    let at_most = tokio::time::Instant::now() + MAX_DEBOUNCE;
    loop {
        tokio::select! {
            _ = shutdown.as_mut() => return Some(None),
            more = stream.message() => match more {
                Ok(Some(_)) => continue,
                Ok(None) | Err(_) => break,
            },
            _ = tokio::time::sleep(DEBOUNCE) => break,
            _ = tokio::time::sleep_until(at_most) => break,
        }
    }
    Some(Some(compacted))
}
