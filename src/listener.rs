//! Every HTTP listener modelplane opens is served here, with bounds on what a stranger can
//! hold open (`axum::serve` sets none of them):
//!
//! - a request's headers must arrive whole within `header_read_timeout`, and an idle
//!   keep-alive connection is closed after the same time (hyper's HTTP/1 header timer runs
//!   from the moment the server waits for the next request);
//! - at most `max_connections` connections are open at once, and at most
//!   `max_connections_per_address` from one client address; a connection past either cap
//!   is closed at once (counted in [`crate::metrics::HTTP_CONNECTIONS_REFUSED`]);
//! - an accept that fails (out of file descriptors, …) is logged and retried: the listener
//!   never stops for it.
//!
//! HTTP/1.1 (with upgrades, for WebSockets): browsers and curl speak it to us. HTTP/2 in
//! clear text only where `h2c` is set (the key check's port: Envoy's gRPC ext_authz): a
//! connection whose first bytes are HTTP/2's preface, which must arrive within
//! `header_read_timeout`; keep-alive pings then close a peer that stops answering.

use std::collections::HashMap;
use std::future::Future;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::ServiceExt;

/// Bounds on a listener's connections; see the module docs.
#[derive(Debug, Clone, Copy)]
pub struct ConnectionLimits {
    pub header_read_timeout: Duration,
    pub max_connections: usize,
    pub max_connections_per_address: usize,
    /// Also serve HTTP/2 with prior knowledge (gRPC).
    pub h2c: bool,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        Self {
            header_read_timeout: Duration::from_secs(10),
            max_connections: 4096,
            max_connections_per_address: 256,
            h2c: false,
        }
    }
}

/// Serves `app` on `listener` until `shutdown` completes; then stops accepting, asks every
/// open connection to finish its request in flight and close, and returns once all have.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: ConnectionLimits,
    shutdown: impl Future<Output = ()> + Send,
) {
    let slots = Arc::new(Slots::new(limits));
    let closing = CancellationToken::new();
    let connections = TaskTracker::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(err) => {
                    // EMFILE and its kind pass when connections close; a pause keeps the
                    // loop from spinning meanwhile.
                    tracing::warn!(error = %err, "cannot accept a connection; retrying");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let slot = match slots.take(peer.ip()) {
            Ok(slot) => slot,
            Err(reason) => {
                metrics::counter!(crate::metrics::HTTP_CONNECTIONS_REFUSED, "reason" => reason)
                    .increment(1);
                tracing::debug!(%peer, reason, "connection refused: over the cap");
                drop(stream);
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let app = app.clone();
        let closing = closing.clone();
        connections.spawn(async move {
            let _slot = slot;
            let service = app.map_request(move |mut request: axum::http::Request<Incoming>| {
                request.extensions_mut().insert(ConnectInfo(peer));
                request.map(axum::body::Body::new)
            });
            let service = TowerToHyperService::new(service);
            // Runs a connection until it ends, or until the listener closes: then it
            // finishes the request in flight.
            macro_rules! drive {
                ($connection:expr) => {{
                    let mut connection = std::pin::pin!($connection);
                    tokio::select! {
                        result = connection.as_mut() => {
                            if let Err(err) = result {
                                tracing::trace!(error = %err, "connection ended with an error");
                            }
                            return;
                        }
                        () = closing.cancelled() => {}
                    }
                    connection.as_mut().graceful_shutdown();
                    let _ = connection.await;
                }};
            }
            if limits.h2c {
                match starts_h2(&stream, limits.header_read_timeout).await {
                    None => return,
                    Some(true) => {
                        let mut builder = hyper::server::conn::http2::Builder::new(
                            hyper_util::rt::TokioExecutor::new(),
                        );
                        builder
                            .timer(TokioTimer::new())
                            .keep_alive_interval(Some(H2_PING))
                            .keep_alive_timeout(limits.header_read_timeout)
                            .max_concurrent_streams(H2_STREAMS);
                        drive!(builder.serve_connection(TokioIo::new(stream), service));
                        return;
                    }
                    Some(false) => {}
                }
            }
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(limits.header_read_timeout)
                .keep_alive(true);
            drive!(
                builder
                    .serve_connection(TokioIo::new(stream), service)
                    .with_upgrades()
            );
        });
    }
    drop(listener);
    closing.cancel();
    connections.close();
    connections.wait().await;
}

/// HTTP/2's connection preface (RFC 9113, 3.4): what a client with prior knowledge sends first.
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// How often an idle HTTP/2 connection is pinged.
const H2_PING: Duration = Duration::from_secs(20);
/// Requests at once on one HTTP/2 connection.
const H2_STREAMS: u32 = 1024;

/// Whether the connection starts with HTTP/2's preface; `None` when its first bytes do not
/// arrive within `deadline` (or it closes first). Peeks: the bytes stay for the server.
async fn starts_h2(stream: &tokio::net::TcpStream, deadline: Duration) -> Option<bool> {
    let mut buf = [0u8; 24];
    let peeking = async {
        loop {
            let n = stream.peek(&mut buf).await.ok()?;
            if n == 0 {
                return None;
            }
            if buf[..n] != H2_PREFACE[..n] {
                return Some(false);
            }
            if n == H2_PREFACE.len() {
                return Some(true);
            }
            // Part of the preface so far: wait for more.
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    };
    tokio::time::timeout(deadline, peeking).await.ok().flatten()
}

/// The open connections, counted in all and per address.
struct Slots {
    limits: ConnectionLimits,
    all: Arc<Semaphore>,
    per_address: Mutex<HashMap<IpAddr, usize>>,
}

/// One open connection's place; given back when dropped.
struct Slot {
    slots: Arc<Slots>,
    address: IpAddr,
    _permit: OwnedSemaphorePermit,
}

impl Slots {
    fn new(limits: ConnectionLimits) -> Self {
        Self {
            limits,
            all: Arc::new(Semaphore::new(limits.max_connections.max(1))),
            per_address: Mutex::new(HashMap::new()),
        }
    }

    fn take(self: &Arc<Self>, address: IpAddr) -> Result<Slot, &'static str> {
        let permit = self
            .all
            .clone()
            .try_acquire_owned()
            .map_err(|_| "max_connections")?;
        let mut per_address = self.per_address.lock().unwrap_or_else(|e| e.into_inner());
        let open = per_address.entry(address).or_insert(0);
        if *open >= self.limits.max_connections_per_address.max(1) {
            return Err("max_connections_per_address");
        }
        *open += 1;
        metrics::gauge!(crate::metrics::HTTP_CONNECTIONS_OPEN).increment(1.0);
        Ok(Slot {
            slots: self.clone(),
            address,
            _permit: permit,
        })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut per_address = self
            .slots
            .per_address
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(open) = per_address.get_mut(&self.address) {
            *open -= 1;
            if *open == 0 {
                per_address.remove(&self.address);
            }
        }
        metrics::gauge!(crate::metrics::HTTP_CONNECTIONS_OPEN).decrement(1.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_count_all_connections_and_each_address() {
        let slots = Arc::new(Slots::new(ConnectionLimits {
            max_connections: 3,
            max_connections_per_address: 2,
            ..ConnectionLimits::default()
        }));
        let a: IpAddr = "127.0.0.1".parse().unwrap();
        let b: IpAddr = "127.0.0.2".parse().unwrap();
        let first = slots.take(a).unwrap();
        let _second = slots.take(a).unwrap();
        assert_eq!(slots.take(a).err(), Some("max_connections_per_address"));
        let _third = slots.take(b).unwrap();
        assert_eq!(slots.take(b).err(), Some("max_connections"));
        drop(first);
        assert!(
            slots.take(a).is_ok(),
            "a closed connection gives its place back"
        );
    }
}
