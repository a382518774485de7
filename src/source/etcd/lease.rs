//! A lease this replica holds in etcd (its summary's, its canaries' verdict's), kept alive by
//! a task of its own, so that nothing the holder awaits (a load, a copy, a slow etcd call)
//! can hold its renewals up. The holder polls [`Kept`] beside its work: it resolves, once,
//! with [`Lapsed`] when the lease can no longer be trusted (etcd says it ended, or does not
//! answer a renewal in time), and the holder opens a new session, writing again what the
//! lapsed lease carried before anything trusts it.
//!
//! Must not: write or read keys (the holders do), or retry (a lapsed lease is the holder's
//! session's end).

use std::time::Duration;

use switchyard_etcd::Client;

/// Why a lease can no longer be trusted.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Lapsed {
    /// etcd answered a renewal with no time left: it did not hear from this replica within
    /// the lease's time (a pause, a partition), and deleted what the lease carried.
    #[error("{what} lapsed: etcd did not hear from this replica within its {ttl} s, and deleted what it carried")]
    Ended { what: &'static str, ttl: i64 },
    /// A renewal could not be sent, or got no answer in time.
    #[error("{what} cannot be renewed: {why}")]
    NotRenewed { what: &'static str, why: String },
}

/// A lease's renewals on their own task; resolves with why they stopped. Dropping it stops
/// the task (the lease then ends within its time unless revoked).
pub struct Kept {
    ended: tokio::sync::oneshot::Receiver<Lapsed>,
    task: tokio::task::JoinHandle<()>,
    what: &'static str,
}

impl Kept {
    /// Renew lease `id` of `ttl` seconds every third of it (two renewals can fail before it
    /// lapses), each answer awaited at most `timeout`. `what` names it in words ("the
    /// summary's lease").
    pub fn spawn(
        mut client: Client,
        id: i64,
        ttl: i64,
        timeout: Duration,
        what: &'static str,
    ) -> Kept {
        let (tx, ended) = tokio::sync::oneshot::channel();
        let every = Duration::from_secs(u64::try_from(ttl / 3).unwrap_or(0).max(1));
        let not_renewed = move |why: String| Lapsed::NotRenewed { what, why };
        let task = tokio::spawn(async move {
            let kept = async {
                let (mut keeper, mut renewals) =
                    match tokio::time::timeout(timeout, client.lease_keep_alive(id)).await {
                        Ok(Ok(kept)) => kept,
                        Ok(Err(e)) => return not_renewed(super::words(&e)),
                        Err(_) => return not_renewed(no_answer(timeout)),
                    };
                let mut tick = tokio::time::interval(every);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    tick.tick().await;
                    match tokio::time::timeout(timeout, keeper.keep_alive()).await {
                        Ok(Ok(())) => {}
                        Ok(Err(e)) => return not_renewed(super::words(&e)),
                        Err(_) => return not_renewed(no_answer(timeout)),
                    }
                    match tokio::time::timeout(timeout, renewals.message()).await {
                        Ok(Ok(Some(r))) if r.ttl() > 0 => {}
                        Ok(Ok(Some(_))) => return Lapsed::Ended { what, ttl },
                        Ok(Ok(None)) => return not_renewed("the renewals ended".into()),
                        Ok(Err(e)) => return not_renewed(super::words(&e)),
                        Err(_) => return not_renewed(no_answer(timeout)),
                    }
                }
            };
            let _ = tx.send(kept.await);
        });
        Kept { ended, task, what }
    }
}

/// Whether etcd refused a write on a lease because the lease is gone (etcd's `NotFound`:
/// "requested lease not found"): the lease lapsed, whatever the renewals said yet.
pub fn gone(e: &switchyard_etcd::Error) -> bool {
    matches!(e, switchyard_etcd::Error::GRpcStatus(s) if s.code() == tonic::Code::NotFound)
}

/// A write on lease `what` that etcd refused, in words: a lapse said as one.
pub fn write_failed(what: &'static str, ttl: i64, e: &switchyard_etcd::Error) -> String {
    if gone(e) {
        Lapsed::Ended { what, ttl }.to_string()
    } else {
        super::words(e)
    }
}

impl Kept {
    /// Whether it has lapsed by now (without waiting).
    pub fn lapsed(&mut self) -> Option<Lapsed> {
        self.ended.try_recv().ok()
    }
}

fn no_answer(timeout: Duration) -> String {
    format!(
        "etcd did not answer within {}",
        humantime::format_duration(timeout)
    )
}

impl std::future::Future for Kept {
    type Output = Lapsed;
    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Lapsed> {
        let what = self.what;
        std::pin::Pin::new(&mut self.ended).poll(cx).map(|r| {
            r.unwrap_or_else(|_| Lapsed::NotRenewed {
                what,
                why: "its keeper stopped".into(),
            })
        })
    }
}

impl Drop for Kept {
    fn drop(&mut self) {
        self.task.abort();
    }
}
