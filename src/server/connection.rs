//! Serving one accepted connection on the xDS port: HTTP/2 (gRPC) or HTTP/1.1 (REST
//! polling), keepalive and stream limits, its age, and its end.
//!
//! Owns: the connection's HTTP settings, what each request learns of its connection
//! ([`ConnInfo`], in its extensions) and acting on what it and its streams tell each other
//! ([`ConnSignals`]), `--max-connection-age` (after a jittered age the
//! connection's xDS streams end with `UNAVAILABLE` and a GOAWAY is sent, so proxies reconnect
//! and spread over the replicas; what is still open after the grace period is closed), and
//! ending on shutdown. Must not: know what the services do.

use std::convert::Infallible;
use std::hash::BuildHasher;
use std::sync::Arc;
use std::time::Duration;

use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tower::ServiceExt;

use super::incoming::{Conn, ConnInfo, ConnSignals};
use super::{KEEPALIVE_INTERVAL, KEEPALIVE_TIMEOUT};
use crate::shutdown::Shutdown;

/// How long connections live, at most (`--max-connection-age`, `--max-connection-age-grace`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectionAge {
    /// Each connection gets this age, give or take [`AGE_JITTER`]; `None`: for ever.
    pub max: Option<Duration>,
    /// After its age, how long a connection may go on finishing requests in progress.
    pub grace: Duration,
}

/// The share of the age by which each connection's age varies, either way, so that
/// connections opened together (after a restart) do not all close together.
pub const AGE_JITTER: f64 = 0.1;

impl Default for ConnectionAge {
    fn default() -> Self {
        ConnectionAge {
            max: None,
            grace: Duration::from_secs(30),
        }
    }
}

impl ConnectionAge {
    /// This connection's age: the maximum, moved by up to [`AGE_JITTER`] either way by
    /// `random` (uniform over `u64`).
    pub fn jittered(&self, random: u64) -> Option<Duration> {
        let max = self.max?;
        let unit = random as f64 / u64::MAX as f64; // 0..=1
        let factor = 1.0 + AGE_JITTER * (2.0 * unit - 1.0);
        Some(max.mul_f64(factor))
    }
}

/// HTTP settings of the xDS port's connections.
#[derive(Clone, Copy, Debug)]
pub struct Settings {
    pub max_streams: u32,
    pub age: ConnectionAge,
}

/// Serve `routes` on `conn` until the client leaves, the connection reaches its age, or
/// `shutdown` (a GOAWAY, then requests in progress finish).
pub async fn serve(
    conn: Conn,
    routes: tonic::service::Routes,
    settings: Settings,
    mut shutdown: Shutdown,
    telemetry: crate::telemetry::Telemetry,
) {
    crate::supervise::fail_point("xds_connection");
    let peer = conn.peer();
    let signals = Arc::new(ConnSignals::default());
    let mut info: ConnInfo = conn.info().clone();
    info.signals = Some(Arc::clone(&signals));
    let service = hyper::service::service_fn(move |mut request: hyper::Request<Incoming>| {
        request.extensions_mut().insert(info.clone());
        let routes = routes.clone();
        async move {
            let response = routes
                .oneshot(request.map(tonic::body::Body::new))
                .await
                .unwrap_or_else(|never: Infallible| match never {});
            Ok::<_, Infallible>(response)
        }
    });
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder.http1().timer(TokioTimer::new());
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(Some(KEEPALIVE_INTERVAL))
        .keep_alive_timeout(KEEPALIVE_TIMEOUT)
        .max_concurrent_streams(settings.max_streams);
    let served = builder.serve_connection_with_upgrades(TokioIo::new(conn), service);
    tokio::pin!(served);
    let age = settings
        .age
        .jittered(std::collections::hash_map::RandomState::new().hash_one(peer));
    let aged = async {
        match age {
            Some(age) => tokio::time::sleep(age).await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(aged);
    let ended = tokio::select! {
        ended = served.as_mut() => Some(ended),
        _ = &mut aged => {
            telemetry.connection_aged(peer, age);
            signals.close();
            served.as_mut().graceful_shutdown();
            None
        }
        _ = shutdown.wait() => {
            served.as_mut().graceful_shutdown();
            None
        }
        // A stream's client read nothing for --stalled-stream-timeout (the stream said so,
        // and counted it): no GOAWAY that would wait on it, the connection is closed now.
        _ = signals.stalled() => return,
    };
    let ended = match ended {
        Some(ended) => ended,
        // Closing: requests in progress finish within the grace period.
        None => match tokio::time::timeout(settings.age.grace, served.as_mut()).await {
            Ok(ended) => ended,
            Err(_) => {
                tracing::debug!(
                    ?peer,
                    "A closing connection outlived its grace period; closed."
                );
                return;
            }
        },
    };
    if let Err(e) = ended {
        tracing::debug!(?peer, error = %e, "An xDS connection ended with an error.");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_vary_by_the_jitter_either_way_and_none_is_for_ever() {
        let age = ConnectionAge {
            max: Some(Duration::from_secs(100)),
            grace: Duration::from_secs(1),
        };
        assert_eq!(age.jittered(0), Some(Duration::from_secs(90)));
        assert_eq!(age.jittered(u64::MAX), Some(Duration::from_secs(110)));
        let mid = age.jittered(u64::MAX / 2).expect("an age");
        assert!(mid > Duration::from_millis(99_990) && mid < Duration::from_millis(100_010));
        assert_eq!(ConnectionAge::default().jittered(42), None);
    }
}
