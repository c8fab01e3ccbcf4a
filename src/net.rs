//! Listening sockets and the HTTP/1.1 + h2c serve loop shared by every HTTP endpoint.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;
use tokio::sync::watch;

/// A response body of bytes held in full.
pub type FullBody = Full<Bytes>;

/// Failure to bind a configured endpoint.
#[derive(Debug, thiserror::Error)]
#[error("bind {what} on {endpoint}: {source}")]
pub struct BindError {
    /// The component that wanted the socket, e.g. `receivers.otlp.protocols.grpc`.
    pub what: String,
    /// The endpoint as configured.
    pub endpoint: String,
    /// The underlying error.
    #[source]
    pub source: std::io::Error,
}

/// Binds `endpoint` (`host:port`, `:port` meaning all interfaces) for `what`.
///
/// # Errors
///
/// When the host does not resolve or the address is in use.
pub async fn bind(what: &str, endpoint: &str) -> Result<TcpListener, BindError> {
    let address = if endpoint.starts_with(':') {
        format!("0.0.0.0{endpoint}")
    } else {
        endpoint.to_owned()
    };
    TcpListener::bind(address.as_str())
        .await
        .map_err(|source| BindError {
            what: what.to_owned(),
            endpoint: endpoint.to_owned(),
            source,
        })
}

/// The local address of a bound listener (for logs and tests that bind port 0).
pub fn local_addr(listener: &TcpListener) -> SocketAddr {
    listener
        .local_addr()
        .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)))
}

/// Serves HTTP/1.1 and cleartext HTTP/2 on `listener` until `stop` turns true, then stops
/// accepting and waits up to `grace` for open connections to finish their requests.
///
/// `handler` is called once per request; it must not panic. Connections that are still
/// busy after `grace` are dropped.
pub async fn serve_http<H, F>(
    listener: TcpListener,
    handler: H,
    mut stop: watch::Receiver<bool>,
    grace: Duration,
) where
    H: Fn(http::Request<Incoming>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = http::Response<FullBody>> + Send + 'static,
{
    let (conn_stop_tx, conn_stop_rx) = watch::channel(false);
    let mut connections = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            biased;
            _ = async { let _ = stop.wait_for(|stopped| *stopped).await; } => break,
            accepted = listener.accept() => {
                let Ok((stream, _peer)) = accepted else { continue };
                // OTLP answers are small; do not let Nagle's algorithm hold them back.
                let _ = stream.set_nodelay(true);
                let handler = handler.clone();
                let mut conn_stop = conn_stop_rx.clone();
                connections.spawn(async move {
                    let service = hyper::service::service_fn(move |request| {
                        let handler = handler.clone();
                        async move { Ok::<_, Infallible>(handler(request).await) }
                    });
                    let builder = auto::Builder::new(TokioExecutor::new());
                    let connection = builder.serve_connection(TokioIo::new(stream), service);
                    tokio::pin!(connection);
                    tokio::select! {
                        _ = connection.as_mut() => {}
                        _ = async { let _ = conn_stop.wait_for(|stopped| *stopped).await; } => {
                            connection.as_mut().graceful_shutdown();
                            let _ = connection.await;
                        }
                    }
                });
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    drop(listener);
    let _ = conn_stop_tx.send(true);
    let drained = tokio::time::timeout(grace, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        connections.abort_all();
    }
}
