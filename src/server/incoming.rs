//! Accepting connections on the xDS port, at most `--max-connections` at once, over TLS
//! when it is configured.
//!
//! Owns: the accept loop, the connection count (a permit per open connection, given back
//! when it closes), what happens past the limit or when accepting fails, the TLS handshake
//! (each in its own task, bounded in time, so a slow client holds up no other), and what a
//! connection tells the services about its peer ([`ConnInfo`]). Must not: know about HTTP/2
//! or streams.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use std::net::SocketAddr;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::server::Connected;

use super::tls::PeerIdentity;
use crate::metrics::StreamMetrics;

/// How long a TLS handshake may take.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// What the services learn of a connection's peer (in each request's extensions).
#[derive(Clone, Debug, Default)]
pub struct ConnInfo {
    pub remote: Option<SocketAddr>,
    /// With mutual TLS: what the client's verified certificate says it is.
    pub identity: Option<Arc<PeerIdentity>>,
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

/// Accept on `listener` until the returned stream is dropped, over TLS with `tls`. Past `max`
/// open connections a new one is closed at once, logged and counted (the client retries
/// with its backoff); existing connections are not affected.
pub fn incoming(
    listener: TcpListener,
    max: usize,
    tls: Option<TlsAcceptor>,
    metrics: StreamMetrics,
) -> ReceiverStream<io::Result<Conn>> {
    let (tx, rx) = mpsc::channel(16);
    let permits = Arc::new(Semaphore::new(max));
    tokio::spawn(async move {
        loop {
            let accepted = tokio::select! {
                accepted = listener.accept() => accepted,
                _ = tx.closed() => break,
            };
            match accepted {
                Ok((tcp, peer)) => match Arc::clone(&permits).try_acquire_owned() {
                    Ok(permit) => {
                        let _ = tcp.set_nodelay(true);
                        let Some(acceptor) = tls.clone() else {
                            let conn = Conn {
                                io: Io::Plain(tcp),
                                info: ConnInfo {
                                    remote: Some(peer),
                                    identity: None,
                                },
                                _permit: permit,
                            };
                            if tx.send(Ok(conn)).await.is_err() {
                                break;
                            }
                            continue;
                        };
                        let tx = tx.clone();
                        tokio::spawn(async move {
                            let handshake =
                                tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp));
                            let stream = match handshake.await {
                                Ok(Ok(stream)) => stream,
                                Ok(Err(e)) => {
                                    tracing::info!(%peer, error = %e, "TLS handshake failed.");
                                    return;
                                }
                                Err(_) => {
                                    tracing::info!(%peer, "TLS handshake timed out.");
                                    return;
                                }
                            };
                            let identity = stream
                                .get_ref()
                                .1
                                .peer_certificates()
                                .and_then(|certs| certs.first())
                                .and_then(|cert| PeerIdentity::of(cert))
                                .map(Arc::new);
                            let conn = Conn {
                                io: Io::Tls(Box::new(stream)),
                                info: ConnInfo {
                                    remote: Some(peer),
                                    identity,
                                },
                                _permit: permit,
                            };
                            let _ = tx.send(Ok(conn)).await;
                        });
                    }
                    Err(_) => {
                        metrics.limit_reached("connections");
                        tracing::warn!(%peer, max, "Closed a new connection: the server has --max-connections open.");
                    }
                },
                Err(e) => {
                    tracing::warn!(error = %e, "Cannot accept a connection (out of file descriptors?); trying again shortly.");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                }
            }
        }
    });
    ReceiverStream::new(rx)
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
