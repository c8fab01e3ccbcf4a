//! Listening sockets, the accept loop, and the HTTP/1.1 + h2c serve loop shared by every
//! HTTP endpoint.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::time::{Instant, Sleep};

/// How long accepting pauses after an error that is not about one connection (`EMFILE`,
/// `ENFILE`, `ENOBUFS`, ...). The pending connection stays in the backlog, so the listener
/// is ready again at once: retrying without a pause would spin a worker thread, and the
/// pause gives open connections time to close and free descriptors.
const ACCEPT_PAUSE: Duration = Duration::from_millis(100);

/// At most one accept-failure log line per listener in this interval; the failures in
/// between are counted into the next line.
const ACCEPT_LOG_INTERVAL: Duration = Duration::from_secs(10);

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

/// Accepts connections from a listener: sets `TCP_NODELAY` on each (OTLP answers are small;
/// Nagle's algorithm would hold them back), skips errors that concern one connection, and
/// after any other error logs it (rate-limited) and pauses [`ACCEPT_PAUSE`] instead of
/// retrying at once. Also a [`Stream`](tokio_stream::Stream) of connections for tonic.
pub struct Acceptor {
    listener: TcpListener,
    endpoint: SocketAddr,
    pause: Option<Pin<Box<Sleep>>>,
    last_logged: Option<Instant>,
    unlogged_failures: u64,
}

impl Acceptor {
    /// Accepts from `listener`.
    pub fn new(listener: TcpListener) -> Self {
        Self {
            endpoint: local_addr(&listener),
            listener,
            pause: None,
            last_logged: None,
            unlogged_failures: 0,
        }
    }

    /// Waits for the next connection; errors are handled as described on [`Acceptor`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: no connection is taken from the listener unless it is returned, and a
    /// pause in progress carries on at the next call.
    pub async fn accept(&mut self) -> TcpStream {
        std::future::poll_fn(|cx| self.poll_accept(cx)).await
    }

    /// Polls for the next connection; see [`accept`](Self::accept).
    pub fn poll_accept(&mut self, cx: &mut Context<'_>) -> Poll<TcpStream> {
        loop {
            if let Some(pause) = &mut self.pause {
                ready!(pause.as_mut().poll(cx));
                self.pause = None;
            }
            match ready!(self.listener.poll_accept(cx)) {
                Ok((stream, _peer)) => {
                    let _ = stream.set_nodelay(true);
                    return Poll::Ready(stream);
                }
                // That connection is gone; the next one is unaffected.
                Err(error) if is_connection_error(&error) => {}
                Err(error) => {
                    self.log_failure(&error);
                    self.pause = Some(Box::pin(tokio::time::sleep(ACCEPT_PAUSE)));
                }
            }
        }
    }

    fn log_failure(&mut self, error: &std::io::Error) {
        let now = Instant::now();
        if self
            .last_logged
            .is_some_and(|at| now.duration_since(at) < ACCEPT_LOG_INTERVAL)
        {
            self.unlogged_failures += 1;
            return;
        }
        tracing::warn!(
            event = "net.accept_failed",
            endpoint = %self.endpoint,
            error = %error,
            failures_since_last_log = self.unlogged_failures,
            pause_ms = ACCEPT_PAUSE.as_millis() as u64,
        );
        self.last_logged = Some(now);
        self.unlogged_failures = 0;
    }
}

impl tokio_stream::Stream for Acceptor {
    type Item = std::io::Result<TcpStream>;

    /// Never ends and never yields an error: errors are handled inside.
    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.get_mut()
            .poll_accept(cx)
            .map(|stream| Some(Ok(stream)))
    }
}

/// Errors of `accept` that concern only the connection being accepted.
fn is_connection_error(error: &std::io::Error) -> bool {
    use std::io::ErrorKind;
    matches!(
        error.kind(),
        ErrorKind::ConnectionAborted
            | ErrorKind::ConnectionReset
            | ErrorKind::ConnectionRefused
            | ErrorKind::Interrupted
            | ErrorKind::WouldBlock
    )
}

/// The address of the client a request came from, put in the request's extensions by
/// [`serve_http`] (for logs only).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerAddr(pub SocketAddr);

/// A connection [`serve_http_on`] serves: a byte stream that knows its client's address.
pub trait Connection:
    tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static
{
    /// The client's address, when the socket still knows it.
    fn client_addr(&self) -> Option<SocketAddr>;
}

impl Connection for TcpStream {
    fn client_addr(&self) -> Option<SocketAddr> {
        self.peer_addr().ok()
    }
}

impl Connection for tokio_rustls::server::TlsStream<TcpStream> {
    fn client_addr(&self) -> Option<SocketAddr> {
        self.get_ref().0.peer_addr().ok()
    }
}

/// Serves HTTP/1.1 and cleartext HTTP/2 on `listener` until `stop` turns true, then stops
/// accepting and waits up to `grace` for open connections to finish their requests.
///
/// `handler` is called once per request, with the client's address in the request's
/// extensions as a [`PeerAddr`]; it must not panic. Connections that are still busy after
/// `grace` are dropped.
pub async fn serve_http<H, F>(
    listener: TcpListener,
    handler: H,
    stop: watch::Receiver<bool>,
    grace: Duration,
) where
    H: Fn(http::Request<Incoming>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = http::Response<FullBody>> + Send + 'static,
{
    serve_http_on(Acceptor::new(listener), handler, stop, grace).await;
}

/// [`serve_http`] over the connections `incoming` yields (TLS streams, for instance), with
/// HTTP/1.1 and HTTP/2 told apart by the client's first bytes. An `Err` item is skipped;
/// the end of the stream stops accepting as `stop` does.
pub async fn serve_http_on<S, IO, H, F>(
    mut incoming: S,
    handler: H,
    mut stop: watch::Receiver<bool>,
    grace: Duration,
) where
    S: tokio_stream::Stream<Item = std::io::Result<IO>> + Unpin,
    IO: Connection,
    H: Fn(http::Request<Incoming>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = http::Response<FullBody>> + Send + 'static,
{
    use tokio_stream::StreamExt as _;

    let (conn_stop_tx, conn_stop_rx) = watch::channel(false);
    let mut connections = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            biased;
            _ = async { let _ = stop.wait_for(|stopped| *stopped).await; } => break,
            next = incoming.next() => {
                let stream = match next {
                    Some(Ok(stream)) => stream,
                    Some(Err(_)) => continue,
                    None => break,
                };
                let handler = handler.clone();
                let mut conn_stop = conn_stop_rx.clone();
                let peer = stream.client_addr().map(PeerAddr);
                connections.spawn(async move {
                    let service = hyper::service::service_fn(move |mut request: http::Request<Incoming>| {
                        if let Some(peer) = peer {
                            request.extensions_mut().insert(peer);
                        }
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
    drop(incoming);
    let _ = conn_stop_tx.send(true);
    let drained = tokio::time::timeout(grace, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        connections.abort_all();
    }
}

#[cfg(test)]
mod tests {
    use tokio_stream::StreamExt;

    use super::*;

    /// Scenario: two clients connect to a listener read through an `Acceptor`, one taken
    /// with `accept`, one as a stream item.
    /// Guarantees: both connections come through, with `TCP_NODELAY` set.
    #[tokio::test]
    async fn accepts_with_nodelay() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let address = local_addr(&listener);
        let mut acceptor = Acceptor::new(listener);
        let _first = TcpStream::connect(address).await.expect("connect");
        let _second = TcpStream::connect(address).await.expect("connect");
        let accepted = acceptor.accept().await;
        assert!(accepted.nodelay().expect("socket option"));
        let streamed = acceptor
            .next()
            .await
            .expect("never ends")
            .expect("never an error");
        assert!(streamed.nodelay().expect("socket option"));
    }

    /// Scenario: accept failures (as with EMFILE) come every 100 ms for 25 s.
    /// Guarantees: they are logged at most once per 10 s, each line counting the failures
    /// left unlogged since the one before.
    #[tokio::test(start_paused = true)]
    async fn accept_failures_are_logged_at_most_every_ten_seconds() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let mut acceptor = Acceptor::new(listener);
        let error = std::io::Error::from_raw_os_error(24);
        let mut logged = Vec::new();
        for _ in 0..250 {
            let before = acceptor.last_logged;
            let unlogged = acceptor.unlogged_failures;
            acceptor.log_failure(&error);
            if acceptor.last_logged != before {
                logged.push(unlogged);
            }
            tokio::time::advance(ACCEPT_PAUSE).await;
        }
        assert_eq!(logged, [0, 99, 99], "lines at 0 s, 10 s and 20 s");
    }
}
