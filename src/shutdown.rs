//! The one shutdown signal. The daemon fires a [`Trigger`] once; every long-running task (the
//! source's following, the xDS and admin servers with their connections and streams, the
//! rollout drivers) holds a clone of its [`Shutdown`] and ends when it fires, as mini-redis's
//! tasks do.
//!
//! Must not: decide when to shut down (the daemon's caller does: SIGINT or SIGTERM, the end
//! of a test).

use tokio::sync::watch;

/// Fires the shutdown, once, for every [`Shutdown`] of its channel. Dropped unfired, it
/// fires too: nothing can tell the tasks to go on any more.
#[derive(Debug)]
pub struct Trigger(watch::Sender<bool>);

/// Whether shutdown has begun, and a way to wait for it; cloned into each task.
#[derive(Clone, Debug)]
pub struct Shutdown(watch::Receiver<bool>);

/// A trigger, and the signal it fires.
pub fn channel() -> (Trigger, Shutdown) {
    let (fire, fired) = watch::channel(false);
    (Trigger(fire), Shutdown(fired))
}

impl Trigger {
    /// Begin shutdown: every [`Shutdown::wait`] completes.
    pub fn fire(&self) {
        self.0.send_replace(true);
    }
}

impl Shutdown {
    /// Completes once shutdown has begun (at once if it already has). Cancel-safe: a
    /// `select!` may drop it and call it again.
    pub async fn wait(&mut self) {
        while !*self.0.borrow_and_update() {
            if self.0.changed().await.is_err() {
                return;
            }
        }
    }

    /// Whether shutdown has begun.
    pub fn fired(&self) -> bool {
        *self.0.borrow()
    }

    /// Wait for shutdown, owning the signal (for an API that takes a future).
    pub async fn waited(mut self) {
        self.wait().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn every_clone_sees_the_one_shutdown_even_one_made_after_it() {
        let (trigger, mut early) = channel();
        let late = early.clone();
        let waiting = tokio::spawn(async move { early.wait().await });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "nothing fired yet");
        trigger.fire();
        tokio::time::timeout(std::time::Duration::from_secs(5), waiting)
            .await
            .expect("the waiting task ends")
            .expect("joins");
        // Begun before it waits: done at once, and again when asked again.
        let mut later = late.clone();
        later.wait().await;
        later.wait().await;
    }

    #[tokio::test]
    async fn a_dropped_trigger_is_a_shutdown() {
        let (trigger, shutdown) = channel();
        drop(trigger);
        tokio::time::timeout(std::time::Duration::from_secs(5), shutdown.waited())
            .await
            .expect("waiting ends when nothing can fire any more");
    }
}
