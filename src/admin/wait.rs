//! The long poll of `/status` (`GET /status?after=TOKEN&wait=DURATION`): held until what the
//! status is made of differs from the token the caller was last answered with (the
//! `x-switchyard-status` header), or until the wait ends. `status --wait` and `apply
//! --wait` follow the fleet with it: each change answers at once, with no poll cadence.
//!
//! Woken by what changes the status: a proxy's report (`Fleet::next_change`), a
//! publication (the cache), a load's report, the other replicas' summaries as read. What
//! only time changes (a poller aging out, a one-off poll's hold ending, a task down) is seen
//! at the wait's end.
//!
//! Must not: compute the status (the caller does, after), or hold anything while it waits.

use std::time::Duration;

use super::summary::status_token;
use super::Admin;

/// The longest a long poll is held.
pub const MAX_WAIT: Duration = Duration::from_secs(10);

/// Wait until the status's token differs from `after`, or `wait` passes (at most
/// [`MAX_WAIT`]).
pub async fn until_changed(admin: &Admin, after: &str, wait: Duration) {
    let deadline = tokio::time::Instant::now() + wait.min(MAX_WAIT);
    let mut serving = admin.cache.subscribe();
    let mut reports = admin.reloader.reports();
    let mut view = admin.replicas.as_ref().map(|r| r.view.clone());
    loop {
        // Armed before the token is read: a change after the read wakes it.
        let next = admin.fleet.next_change();
        serving.borrow_and_update();
        reports.borrow_and_update();
        if let Some(view) = &mut view {
            view.borrow_and_update();
        }
        if status_token(admin) != after {
            return;
        }
        let view_changed = async {
            match &mut view {
                Some(view) => {
                    if view.changed().await.is_err() {
                        std::future::pending::<()>().await;
                    }
                }
                None => std::future::pending::<()>().await,
            }
        };
        tokio::select! {
            _ = next.wait() => {}
            r = serving.changed() => if r.is_err() { return },
            r = reports.changed() => if r.is_err() { return },
            _ = view_changed => {}
            _ = tokio::time::sleep_until(deadline) => return,
        }
    }
}
