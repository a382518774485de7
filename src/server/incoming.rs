//! Accepting connections on the xDS port (at most `--max-connections` at once) and on the
//! admin port, over TLS when it is configured.
//!
//! Owns: the accept loop, the connection count (a permit per open connection, given back
//! when it closes), what happens past the limit or when accepting fails, the TLS handshake
//! (each in its own task, bounded in time, so a slow client holds up no other), and what a
//! connection tells the services about its peer ([`ConnInfo`], with the [`ConnSignals`] its
//! task and the services share). Must not: know about HTTP/2 or streams.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use std::net::SocketAddr;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, Notify, OwnedSemaphorePermit, Semaphore};
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::server::Connected;

use super::tls::{PeerIdentity, Tls};
use crate::telemetry::{Limit, Telemetry};

/// How long a TLS handshake (or, without TLS, a connection's first byte) may take, by
/// default.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// What the services learn of a connection's peer (in each request's extensions).
#[derive(Clone, Debug, Default)]
pub struct ConnInfo {
    pub remote: Option<SocketAddr>,
    /// With mutual TLS: what the client's verified certificate says it is.
    pub identity: Option<Arc<PeerIdentity>>,
    /// What the connection and its streams tell each other: it is closing (it reached its
    /// age), so its xDS streams end and their clients reconnect, perhaps to another
    /// replica; a stream stalled past `--stalled-stream-timeout`, so it is closed.
    pub signals: Option<Arc<ConnSignals>>,
}

/// What a connection's task and its services' streams tell each other (each request carries
/// it in its [`ConnInfo`]; `connection` acts on it): the connection reached its age, or a
/// stream stalled. One allocation per connection: a `watch` channel for the first and a
/// `Notify` for the second took 432 bytes of every proxy (docs/benchmarks.md, "The stream
/// task's memory and the convergence count").
#[derive(Debug, Default)]
pub struct ConnSignals {
    /// The connection reached its age: its xDS streams end, so that their clients
    /// reconnect (perhaps to another replica).
    closing: AtomicBool,
    closing_told: Notify,
    /// A stream's client read or answered nothing for `--stalled-stream-timeout`.
    stalled: Notify,
}

impl ConnSignals {
    /// The connection is closing: every stream waiting in [`ConnSignals::closing`] is
    /// told, and every one that waits later too.
    pub fn close(&self) {
        self.closing.store(true, Ordering::SeqCst);
        self.closing_told.notify_waiters();
    }

    /// Resolves once the connection is closing.
    pub async fn closing(&self) {
        loop {
            // Armed before the flag is read: a `close` in between still wakes it.
            let told = self.closing_told.notified();
            tokio::pin!(told);
            told.as_mut().enable();
            if self.closing.load(Ordering::SeqCst) {
                return;
            }
            told.await;
        }
    }

    /// A stream stalled: the connection is to be closed (no GOAWAY that would wait on it).
    pub fn stall(&self) {
        self.stalled.notify_one();
    }

    /// Resolves once a stream stalled (at once if one did before the wait).
    pub async fn stalled(&self) {
        self.stalled.notified().await;
    }
}

/// Plain TCP, or TLS over it.
#[derive(Debug)]
enum Io {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

/// How long to wait before accepting again after accepting failed (out of file descriptors,
/// say), instead of spinning.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// An accepted connection, holding its place among the open ones until dropped.
#[derive(Debug)]
pub struct Conn {
    io: Io,
    info: ConnInfo,
    _permit: OwnedSemaphorePermit,
}

/// How a port accepts connections.
#[derive(Clone, Debug)]
pub struct Accept {
    /// The port's name in logs (`xDS`, `admin`).
    pub port: &'static str,
    /// Open connections at most; past it a new one is closed at once.
    pub max: usize,
    /// What a connection closed past `max` is counted as.
    pub limit: &'static str,
    pub tls: Option<Tls>,
    /// How long a new connection may take to complete its TLS handshake or, without TLS,
    /// to send its first byte.
    pub handshake_timeout: Duration,
}

/// Accept on `listener` as `accept` says until the returned stream is dropped. Past `max`
/// open connections a new one is closed at once, logged and counted (the client retries
/// with its backoff); existing connections are not affected. A connection that does not
/// complete its TLS handshake, or send anything, within the handshake time-out is closed,
/// logged and counted as `handshake_timeout`: each waits in its own task, so a slow client
/// holds up no other.
pub fn incoming(listener: TcpListener, accept: Accept, telemetry: Telemetry) -> Incoming {
    let (tx, rx) = mpsc::channel(16);
    let permits = Arc::new(Semaphore::new(accept.max));
    let task = tokio::spawn(async move {
        let port = accept.port;
        loop {
            let accepted = tokio::select! {
                accepted = listener.accept() => accepted,
                _ = tx.closed() => break,
            };
            if accepted.is_ok() && accept.port == "xDS" {
                crate::supervise::fail_point("xds_accept");
            }
            match accepted {
                Ok((tcp, peer)) => match Arc::clone(&permits).try_acquire_owned() {
                    Ok(permit) => {
                        let _ = tcp.set_nodelay(true);
                        let tx = tx.clone();
                        let tls = accept.tls.clone();
                        let (timeout, telemetry) = (accept.handshake_timeout, telemetry.clone());
                        tokio::spawn(async move {
                            // Checks the TLS files (a `stat` each) here, not in the loop.
                            let acceptor = tls.as_ref().map(Tls::acceptor);
                            let opened = tokio::time::timeout(timeout, open(tcp, acceptor));
                            let (io, identity) = match opened.await {
                                Ok(Ok(Some(opened))) => opened,
                                Ok(Ok(None)) => return,
                                Ok(Err(e)) => {
                                    tracing::info!(port, %peer, error = %e, "TLS handshake failed.");
                                    return;
                                }
                                Err(_) => {
                                    telemetry.limit_reached(Limit::HandshakeTimeout {
                                        port,
                                        peer,
                                        timeout,
                                    });
                                    return;
                                }
                            };
                            let conn = Conn {
                                io,
                                info: ConnInfo {
                                    remote: Some(peer),
                                    identity,
                                    signals: None,
                                },
                                _permit: permit,
                            };
                            let _ = tx.send(Ok(conn)).await;
                        });
                    }
                    Err(_) => {
                        telemetry.limit_reached(Limit::Connections {
                            limit: accept.limit,
                            port,
                            peer,
                            max: accept.max,
                        });
                    }
                },
                Err(e) => {
                    tracing::warn!(port, error = %e, "Cannot accept a connection (out of file descriptors?); trying again shortly.");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                }
            }
        }
    });
    Incoming {
        connections: ReceiverStream::new(rx),
        task,
    }
}

/// The connections a port accepts, from its accept loop (a task of its own, aborted when
/// this is dropped). The stream ends only if the loop did ([`Incoming::ended`] says why).
pub struct Incoming {
    connections: ReceiverStream<io::Result<Conn>>,
    task: tokio::task::JoinHandle<()>,
}

impl Incoming {
    /// Why the accept loop ended (once the stream has): it panicked, or ended.
    pub async fn ended(&mut self) -> String {
        let ended = (&mut self.task).await;
        match ended {
            Ok(()) => "the accept loop ended".into(),
            Err(e) if e.is_panic() => format!(
                "the accept loop panicked: {}",
                crate::supervise::panic_words(e.into_panic())
            ),
            Err(_) => "the accept loop was cancelled".into(),
        }
    }
}

impl tokio_stream::Stream for Incoming {
    type Item = io::Result<Conn>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        Pin::new(&mut self.connections).poll_next(cx)
    }
}

impl Drop for Incoming {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The TLS handshake with `acceptor`, and the identity a client certificate proves; or,
/// without TLS, the first byte sent (peeked, not read). `None`: the client left first.
async fn open(
    tcp: TcpStream,
    acceptor: Option<TlsAcceptor>,
) -> io::Result<Option<(Io, Option<Arc<PeerIdentity>>)>> {
    let Some(acceptor) = acceptor else {
        let sent = tcp.peek(&mut [0u8; 1]).await?;
        return Ok((sent > 0).then_some((Io::Plain(tcp), None)));
    };
    let stream = acceptor.accept(tcp).await?;
    let identity = stream
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|certs| certs.first())
        .and_then(|cert| PeerIdentity::of(cert))
        .map(Arc::new);
    Ok(Some((Io::Tls(Box::new(stream)), identity)))
}

impl Conn {
    /// The client's address.
    pub fn peer(&self) -> Option<SocketAddr> {
        self.info.remote
    }

    /// What the services learn of this connection's peer.
    pub fn info(&self) -> &ConnInfo {
        &self.info
    }
}

impl Connected for Conn {
    type ConnectInfo = ConnInfo;

    fn connect_info(&self) -> ConnInfo {
        self.info.clone()
    }
}

/// `$body` with `$io` bound to the pinned plain or TLS stream.
macro_rules! with_io {
    ($self:ident, $io:ident => $body:expr) => {
        match &mut $self.io {
            Io::Plain(s) => {
                let $io = Pin::new(s);
                $body
            }
            Io::Tls(s) => {
                let $io = Pin::new(&mut **s);
                $body
            }
        }
    };
}

impl AsyncRead for Conn {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        with_io!(self, io => io.poll_read(cx, buf))
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        with_io!(self, io => io.poll_write(cx, buf))
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        with_io!(self, io => io.poll_flush(cx))
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        with_io!(self, io => io.poll_shutdown(cx))
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        with_io!(self, io => io.poll_write_vectored(cx, bufs))
    }

    fn is_write_vectored(&self) -> bool {
        match &self.io {
            Io::Plain(s) => s.is_write_vectored(),
            Io::Tls(s) => s.is_write_vectored(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_connection_closing_tells_its_streams_waiting_and_to_come_and_a_stall_is_kept() {
        let signals = Arc::new(ConnSignals::default());
        let waiting = tokio::spawn({
            let signals = Arc::clone(&signals);
            async move { signals.closing().await }
        });
        // Bounded: the waiter is told however the task and `close` interleave.
        tokio::task::yield_now().await;
        signals.close();
        tokio::time::timeout(Duration::from_secs(10), waiting)
            .await
            .expect("a stream waiting is told")
            .expect("the waiter did not panic");
        tokio::time::timeout(Duration::from_secs(10), signals.closing())
            .await
            .expect("a stream that waits after the close is told at once");
        // A stall told before the connection waits for one is not lost.
        signals.stall();
        tokio::time::timeout(Duration::from_secs(10), signals.stalled())
            .await
            .expect("the stall is kept until the connection looks");
    }
}
