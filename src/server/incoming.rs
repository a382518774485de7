//! Accepting connections on the xDS port, at most `--max-connections` at once.
//!
//! Owns: the accept loop, the connection count (a permit per open connection, given back
//! when it closes), and what happens past the limit or when accepting fails. Must not: know
//! about HTTP/2 or streams.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::server::{Connected, TcpConnectInfo};

use crate::metrics::StreamMetrics;

/// How long to wait before accepting again after accepting failed (out of file descriptors,
/// say), instead of spinning.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// An accepted connection, holding its place among the open ones until dropped.
#[derive(Debug)]
pub struct Conn {
    tcp: TcpStream,
    _permit: OwnedSemaphorePermit,
}

/// Accept on `listener` until the returned stream is dropped. Past `max` open connections a
/// new one is closed at once, logged and counted (the client retries with its backoff);
/// existing connections are not affected.
pub fn incoming(
    listener: TcpListener,
    max: usize,
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
                        let conn = Conn {
                            tcp,
                            _permit: permit,
                        };
                        if tx.send(Ok(conn)).await.is_err() {
                            break;
                        }
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
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> TcpConnectInfo {
        self.tcp.connect_info()
    }
}

impl AsyncRead for Conn {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tcp).poll_read(cx, buf)
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.tcp).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tcp).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tcp).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.tcp).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.tcp.is_write_vectored()
    }
}
