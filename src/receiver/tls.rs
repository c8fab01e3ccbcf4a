//! Server TLS for both OTLP receivers: the handshake in front of the gRPC and HTTP servers,
//! mTLS, and reloading the certificate, key and client CA from disk.
//!
//! A [`ServerTls`] holds the rustls configuration in use. Each accepted TCP connection is
//! handshaken with the configuration current at that moment, on its own task (so a slow
//! client holds up nobody) and within [`HANDSHAKE_TIMEOUT`]; what comes out is a TLS stream
//! that the servers serve exactly as they serve a TCP stream ([`TlsIncoming`]).
//!
//! With `reload_interval`, the files are read again on that interval (on a blocking
//! thread). When their content changed and they make a valid configuration, it replaces the
//! one in use: handshakes from then on present the new certificate (and verify clients
//! against the new CA), and connections already open keep theirs. When they do not (a file
//! half written, a key that does not match the certificate yet), the configuration in use
//! stays, the failure is counted and logged (at most once per [`RELOAD_LOG_INTERVAL`]), and
//! the files are tried again when their content changes next.
//!
//! Handshake failures are counted by [`HandshakeFailure`] and never logged: they are the
//! client's doing (a plaintext client, an untrusted or missing client certificate), and a
//! port scanner would otherwise fill the log.

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, RwLock};
use std::task::{Context, Poll};
use std::time::Duration;

use prometheus::{IntCounter, IntCounterVec, Registry};
use tokio::net::TcpStream;
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::MissedTickBehavior;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

use super::Transport;
use crate::config::{ComponentId, ServerTlsError, ServerTlsFiles, TlsServerConfig};
use crate::net::Acceptor;
use crate::telemetry::counter_vec;
use crate::telemetry::log_throttle::LogThrottle;

/// How long a client has to complete its handshake once its connection is accepted; then
/// the connection is closed and counted as [`HandshakeFailure::Timeout`]. Long enough for
/// a slow link, short enough that stalled connections do not pile up.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// At most this many handshakes run at once per server; beyond it, connections wait in the
/// listen backlog until one finishes.
const MAX_PENDING_HANDSHAKES: usize = 1024;

/// At most one log line per server this often about failed reloads; the failures in between
/// are counted into the next line (and each one on `/metrics`).
const RELOAD_LOG_INTERVAL: Duration = Duration::from_secs(60);

/// Which protocols a server offers by ALPN.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Alpn {
    /// `h2` only: gRPC.
    H2,
    /// `h2`, then `http/1.1`: OTLP/HTTP.
    H2AndHttp1,
}

impl Alpn {
    fn protocols(self) -> &'static [&'static [u8]] {
        match self {
            Self::H2 => &[b"h2"],
            Self::H2AndHttp1 => &[b"h2", b"http/1.1"],
        }
    }
}

/// Why a TLS handshake failed: the `reason` label of
/// `tailgate_receiver_tls_handshake_failures_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HandshakeFailure {
    /// The client did not speak TLS (a plaintext HTTP or gRPC client).
    NotTls,
    /// mTLS: the client presented no certificate.
    NoClientCertificate,
    /// mTLS: the client's certificate did not verify against `client_ca_file` (another CA,
    /// expired, not for client authentication).
    BadClientCertificate,
    /// The client ended the handshake with an alert, typically because it does not trust
    /// the server's certificate.
    PeerRejected,
    /// No TLS version, cipher suite or ALPN protocol in common.
    Incompatible,
    /// Not finished within [`HANDSHAKE_TIMEOUT`].
    Timeout,
    /// The connection was closed or reset during the handshake.
    Closed,
    /// Any other TLS error (a malformed message, for instance).
    Other,
}

impl HandshakeFailure {
    /// Every reason, for creating the series at zero.
    pub const ALL: [Self; 8] = [
        Self::NotTls,
        Self::NoClientCertificate,
        Self::BadClientCertificate,
        Self::PeerRejected,
        Self::Incompatible,
        Self::Timeout,
        Self::Closed,
        Self::Other,
    ];

    /// The label value.
    pub fn label(self) -> &'static str {
        match self {
            Self::NotTls => "not_tls",
            Self::NoClientCertificate => "no_client_certificate",
            Self::BadClientCertificate => "bad_client_certificate",
            Self::PeerRejected => "peer_rejected",
            Self::Incompatible => "incompatible",
            Self::Timeout => "timeout",
            Self::Closed => "closed",
            Self::Other => "other",
        }
    }

    /// Classifies an error of `tokio_rustls`'s accept: rustls errors come wrapped in an
    /// `io::Error`; any other I/O error means the connection went away.
    fn of(error: &io::Error) -> Self {
        use rustls::Error as Tls;
        let Some(tls) = error
            .get_ref()
            .and_then(|inner| inner.downcast_ref::<Tls>())
        else {
            return Self::Closed;
        };
        match tls {
            Tls::InvalidMessage(rustls::InvalidMessage::InvalidContentType) => Self::NotTls,
            Tls::NoCertificatesPresented => Self::NoClientCertificate,
            Tls::InvalidCertificate(_) => Self::BadClientCertificate,
            Tls::AlertReceived(_) => Self::PeerRejected,
            Tls::PeerIncompatible(_) | Tls::NoApplicationProtocol => Self::Incompatible,
            _ => Self::Other,
        }
    }
}

/// The outcome of one reload check: the `result` label of
/// `tailgate_receiver_tls_reloads_total` (except [`Reload::Unchanged`], which is not
/// counted).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reload {
    /// The files have the content last seen: nothing to do.
    Unchanged,
    /// The files changed and are in use from now on.
    Reloaded,
    /// The files changed but do not make a valid configuration: the one in use stays.
    Failed,
}

/// The TLS metric families, registered once per registry.
#[derive(Clone)]
pub struct TlsMetricFamilies {
    handshakes: IntCounterVec,
    failures: IntCounterVec,
    reloads: IntCounterVec,
}

impl TlsMetricFamilies {
    /// Registers the families in `registry`.
    ///
    /// # Errors
    ///
    /// When they are already registered there.
    pub fn register(registry: &Registry) -> Result<Self, prometheus::Error> {
        Ok(Self {
            handshakes: counter_vec(
                registry,
                (
                    "tailgate_receiver_tls_handshakes_total",
                    "TLS handshakes completed by a receiver.",
                ),
                &["receiver", "transport"],
            )?,
            failures: counter_vec(
                registry,
                (
                    "tailgate_receiver_tls_handshake_failures_total",
                    "TLS handshakes that failed, by reason: not_tls, no_client_certificate, \
                     bad_client_certificate, peer_rejected (the client refused the server's \
                     certificate), incompatible, timeout, closed, other.",
                ),
                &["receiver", "transport", "reason"],
            )?,
            reloads: counter_vec(
                registry,
                (
                    "tailgate_receiver_tls_reloads_total",
                    "Changes of a receiver's TLS files seen by reload_interval, by result: \
                     success (in use from then on) or failure (the files in use stay).",
                ),
                &["receiver", "transport", "result"],
            )?,
        })
    }

    /// Handles bound to one receiver and transport, every series created at zero.
    pub fn for_receiver(&self, id: &ComponentId, transport: Transport) -> TlsMetrics {
        let labels = [id.written.as_str(), transport.label()];
        let failures = HandshakeFailure::ALL.map(|reason| {
            self.failures
                .with_label_values(&[labels[0], labels[1], reason.label()])
        });
        let reload = |result: &str| {
            self.reloads
                .with_label_values(&[labels[0], labels[1], result])
        };
        TlsMetrics {
            handshakes: self.handshakes.with_label_values(&labels),
            failures,
            reloaded: reload("success"),
            reload_failed: reload("failure"),
            receiver: id.written.clone(),
            transport,
        }
    }
}

/// One receiver transport's TLS metric handles.
#[derive(Clone)]
pub struct TlsMetrics {
    handshakes: IntCounter,
    /// In the order of [`HandshakeFailure::ALL`].
    failures: [IntCounter; 8],
    reloaded: IntCounter,
    reload_failed: IntCounter,
    receiver: String,
    transport: Transport,
}

impl TlsMetrics {
    fn record_failure(&self, failure: HandshakeFailure) {
        if let Some(index) = HandshakeFailure::ALL.iter().position(|f| *f == failure) {
            self.failures[index].inc();
        }
    }
}

/// A receiver's TLS: the rustls configuration in use, and how to reload it.
///
/// Cheap to clone; clones share the configuration.
#[derive(Clone)]
pub struct ServerTls {
    shared: Arc<Shared>,
}

struct Shared {
    settings: TlsServerConfig,
    alpn: Alpn,
    /// What handshakes use. A std lock: held only to clone or swap the `Arc`, never across
    /// an await.
    current: RwLock<Arc<rustls::ServerConfig>>,
    /// The content of the files last read, whether it loaded or not: a reload acts only
    /// when it differs. Locked only by the reload, one at a time.
    last_read: Mutex<ServerTlsFiles>,
    /// When a failed reload was last logged, and the failures since that were not.
    reload_failure_log: Mutex<LogThrottle>,
    metrics: TlsMetrics,
}

impl ServerTls {
    /// Loads the files of `settings` (reading them on this thread: they are small, and this
    /// runs once, at start) and builds the configuration, offering `alpn`.
    ///
    /// # Errors
    ///
    /// [`ServerTlsError`], naming the `tls` key of the file at fault, when a file cannot be
    /// read or parsed or the key does not match the certificate.
    pub fn start(
        settings: &TlsServerConfig,
        alpn: Alpn,
        metrics: TlsMetrics,
    ) -> Result<Self, ServerTlsError> {
        let files = ServerTlsFiles::read(settings);
        let config = files.server_config(settings, alpn.protocols())?;
        Ok(Self {
            shared: Arc::new(Shared {
                settings: settings.clone(),
                alpn,
                current: RwLock::new(Arc::new(config)),
                last_read: Mutex::new(files),
                reload_failure_log: Mutex::new(LogThrottle::new(RELOAD_LOG_INTERVAL)),
                metrics,
            }),
        })
    }

    /// The configuration new handshakes use.
    pub fn current(&self) -> Arc<rustls::ServerConfig> {
        self.shared
            .current
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// Reads the files again (on a blocking thread) and, when their content changed, puts
    /// the configuration they make in use, or keeps the one in use when they make none
    /// (counting and logging that, rate-limited).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the files are compared and swapped in one step on the blocking thread,
    /// which finishes even if this future is dropped.
    pub async fn reload(&self) -> Reload {
        let shared = self.shared.clone();
        let outcome = tokio::task::spawn_blocking(move || shared.reload_blocking()).await;
        match outcome {
            Ok(Ok(reload)) => reload,
            Ok(Err(error)) => {
                self.shared.metrics.reload_failed.inc();
                self.shared.log_reload_failure(&error);
                Reload::Failed
            }
            // The blocking task panicked or the runtime is shutting down: nothing changed.
            Err(_) => Reload::Unchanged,
        }
    }

    /// Wraps `acceptor`: a stream of handshaken TLS connections (see [`TlsIncoming`]). With
    /// `reload_interval` set, the files are checked on that interval for as long as the
    /// stream lives.
    pub fn incoming(&self, acceptor: Acceptor) -> TlsIncoming {
        let reloads = self.shared.settings.reload_interval.map(|interval| {
            let tls = self.clone();
            AbortOnDrop(tokio::spawn(async move {
                let mut ticks = tokio::time::interval(interval);
                ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
                // The first tick is immediate; the files were just read.
                ticks.tick().await;
                loop {
                    ticks.tick().await;
                    tls.reload().await;
                }
            }))
        });
        TlsIncoming {
            acceptor,
            tls: self.clone(),
            handshakes: JoinSet::new(),
            _reloads: reloads,
        }
    }
}

impl Shared {
    /// The blocking part of [`ServerTls::reload`]: `Err` when the changed files do not load.
    fn reload_blocking(&self) -> Result<Reload, ServerTlsError> {
        let mut last_read = self
            .last_read
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let files = ServerTlsFiles::read(&self.settings);
        if files == *last_read {
            return Ok(Reload::Unchanged);
        }
        let loaded = files.server_config(&self.settings, self.alpn.protocols());
        // Remembered whether it loads or not, so that files that stay broken count once.
        *last_read = files;
        let config = loaded?;
        *self
            .current
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Arc::new(config);
        self.metrics.reloaded.inc();
        tracing::info!(
            event = "receiver.tls.reloaded",
            receiver = %self.metrics.receiver,
            transport = self.metrics.transport.label(),
            cert_file = %self.settings.cert_file.display(),
        );
        Ok(Reload::Reloaded)
    }

    fn log_reload_failure(&self, error: &ServerTlsError) {
        let due = self
            .reload_failure_log
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .due();
        let Some(failures_since_last_log) = due else {
            return;
        };
        tracing::warn!(
            event = "receiver.tls.reload_failed",
            receiver = %self.metrics.receiver,
            transport = self.metrics.transport.label(),
            error = %error,
            failures_since_last_log,
            "the changed TLS files could not be loaded; the certificate in use stays until \
             they are fixed",
        );
    }
}

/// Aborts a task when dropped: ties the reload loop to the server's lifetime.
struct AbortOnDrop(JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Handshaken TLS connections from an [`Acceptor`]: a [`Stream`](tokio_stream::Stream) that
/// never ends and never yields an error (failed handshakes are counted and skipped), for
/// tonic's `serve_with_incoming` and [`crate::net::serve_http_on`].
///
/// Handshakes run on their own tasks, at most [`MAX_PENDING_HANDSHAKES`] at a time, each
/// within [`HANDSHAKE_TIMEOUT`]. Dropping the stream aborts those in progress (and the
/// reload loop).
pub struct TlsIncoming {
    acceptor: Acceptor,
    tls: ServerTls,
    handshakes: JoinSet<Option<TlsStream<TcpStream>>>,
    _reloads: Option<AbortOnDrop>,
}

impl TlsIncoming {
    fn start_handshake(&mut self, stream: TcpStream) {
        let acceptor = TlsAcceptor::from(self.tls.current());
        let metrics = self.tls.shared.metrics.clone();
        self.handshakes.spawn(async move {
            match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                Ok(Ok(stream)) => {
                    metrics.handshakes.inc();
                    Some(stream)
                }
                Ok(Err(error)) => {
                    metrics.record_failure(HandshakeFailure::of(&error));
                    None
                }
                Err(_elapsed) => {
                    metrics.record_failure(HandshakeFailure::Timeout);
                    None
                }
            }
        });
    }
}

impl tokio_stream::Stream for TlsIncoming {
    type Item = io::Result<TlsStream<TcpStream>>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            while this.handshakes.len() < MAX_PENDING_HANDSHAKES {
                match this.acceptor.poll_accept(cx) {
                    Poll::Ready(stream) => this.start_handshake(stream),
                    Poll::Pending => break,
                }
            }
            match this.handshakes.poll_join_next(cx) {
                Poll::Ready(Some(Ok(Some(stream)))) => return Poll::Ready(Some(Ok(stream))),
                // A failed handshake (counted), or a handshake task that panicked.
                Poll::Ready(Some(_)) => {}
                // No handshake in progress: the acceptor has registered the waker.
                Poll::Ready(None) | Poll::Pending => return Poll::Pending,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use rcgen::{
        BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair, KeyUsagePurpose,
    };

    use super::*;
    use crate::config::TlsVersion;
    use crate::receiver::metrics::labelled_counter;

    /// A CA and a server certificate (with its key) for `localhost`, both PEM.
    fn pair(serial: u64) -> (String, String) {
        let mut ca = CertificateParams::new(Vec::<String>::new()).expect("params");
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.key_usages = vec![KeyUsagePurpose::KeyCertSign];
        let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate().expect("key")).expect("ca");
        let mut leaf = CertificateParams::new(vec!["localhost".to_owned()]).expect("params");
        leaf.serial_number = Some(serial.into());
        let key = KeyPair::generate().expect("key");
        let cert = leaf.signed_by(&key, &ca).expect("leaf");
        (cert.pem(), key.serialize_pem())
    }

    fn settings(dir: &Path) -> TlsServerConfig {
        TlsServerConfig {
            cert_file: dir.join("tls.crt"),
            key_file: dir.join("tls.key"),
            client_ca_file: None,
            min_version: TlsVersion::Tls12,
            max_version: None,
            reload_interval: Some(Duration::from_secs(1)),
        }
    }

    fn metrics(registry: &Registry) -> TlsMetrics {
        let id = ComponentId {
            written: "otlp".into(),
            kind: "otlp".into(),
            name: None,
        };
        TlsMetricFamilies::register(registry)
            .expect("fresh registry")
            .for_receiver(&id, Transport::Grpc)
    }

    fn reloads(registry: &Registry, result: &str) -> u64 {
        labelled_counter(
            registry,
            "tailgate_receiver_tls_reloads_total",
            "result",
            result,
        )
    }

    /// Scenario: a server started on pair A; reload checks with the files unchanged, with
    /// half of certificate B written, the same broken content again, all of certificate B
    /// beside key A, then key B.
    /// Guarantees: unchanged files do nothing; each broken change is a counted failure
    /// that keeps pair A in use, counted once however often it is seen; the matching pair
    /// B is put in use and counted as a success.
    #[tokio::test]
    async fn reloads_only_a_changed_pair_that_loads() {
        let dir = tempfile::tempdir().expect("tempdir");
        let settings = settings(dir.path());
        let (cert_a, key_a) = pair(1);
        let (cert_b, key_b) = pair(2);
        std::fs::write(&settings.cert_file, &cert_a).expect("write");
        std::fs::write(&settings.key_file, &key_a).expect("write");
        let registry = Registry::new();
        let tls = ServerTls::start(&settings, Alpn::H2, metrics(&registry)).expect("loads");
        let in_use = tls.current();
        let alpn: Vec<Vec<u8>> = vec![b"h2".to_vec()];
        assert_eq!(in_use.alpn_protocols, alpn);

        assert_eq!(tls.reload().await, Reload::Unchanged);
        std::fs::write(&settings.cert_file, &cert_b[..cert_b.len() / 2]).expect("write");
        assert_eq!(tls.reload().await, Reload::Failed);
        assert_eq!(
            tls.reload().await,
            Reload::Unchanged,
            "the same broken file"
        );
        std::fs::write(&settings.cert_file, &cert_b).expect("write");
        assert_eq!(tls.reload().await, Reload::Failed, "key A does not match B");
        assert!(Arc::ptr_eq(&in_use, &tls.current()), "pair A stays in use");
        assert_eq!(reloads(&registry, "failure"), 2);
        assert_eq!(reloads(&registry, "success"), 0);

        std::fs::write(&settings.key_file, &key_b).expect("write");
        assert_eq!(tls.reload().await, Reload::Reloaded);
        assert!(!Arc::ptr_eq(&in_use, &tls.current()));
        assert_eq!(tls.current().alpn_protocols, alpn, "ALPN kept");
        assert_eq!(reloads(&registry, "success"), 1);
        assert_eq!(reloads(&registry, "failure"), 2);
        assert_eq!(tls.reload().await, Reload::Unchanged);
    }

    fn handshake_failures(registry: &Registry, reason: &str) -> u64 {
        labelled_counter(
            registry,
            "tailgate_receiver_tls_handshake_failures_total",
            "reason",
            reason,
        )
    }

    /// Scenario: on paused time, a TLS listener gets a client that connects and sends
    /// nothing, and one that sends a plaintext HTTP request; the stream of handshaken
    /// connections is polled for twice the handshake timeout.
    /// Guarantees: neither comes out as a connection; the plaintext one is counted as
    /// not_tls at once and the silent one as timeout once the timeout has passed, and the
    /// stream goes on waiting for the next connection instead of ending.
    #[tokio::test(start_paused = true)]
    async fn failed_handshakes_are_counted_and_skipped() {
        use tokio::io::AsyncWriteExt as _;
        use tokio_stream::StreamExt as _;

        let dir = tempfile::tempdir().expect("tempdir");
        let settings = TlsServerConfig {
            reload_interval: None,
            ..settings(dir.path())
        };
        let (cert, key) = pair(1);
        std::fs::write(&settings.cert_file, &cert).expect("write");
        std::fs::write(&settings.key_file, &key).expect("write");
        let registry = Registry::new();
        let tls = ServerTls::start(&settings, Alpn::H2AndHttp1, metrics(&registry)).expect("loads");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let address = crate::net::local_addr(&listener);
        let mut incoming = tls.incoming(Acceptor::new(listener));

        let _silent = TcpStream::connect(address).await.expect("connect");
        let mut plaintext = TcpStream::connect(address).await.expect("connect");
        plaintext
            .write_all(b"POST /v1/traces HTTP/1.1\r\nhost: x\r\n\r\n")
            .await
            .expect("write");

        let next = tokio::time::timeout(HANDSHAKE_TIMEOUT * 2, incoming.next()).await;
        assert!(
            next.is_err(),
            "no connection comes out, and the stream does not end"
        );
        assert_eq!(handshake_failures(&registry, "not_tls"), 1);
        assert_eq!(handshake_failures(&registry, "timeout"), 1);
    }

    /// Scenario: accept errors as tokio-rustls reports them: rustls errors wrapped in an
    /// `io::Error`, and a plain I/O error.
    /// Guarantees: each maps to its reason, plaintext bytes (an invalid record type) to
    /// `not_tls`, an I/O error to `closed`, anything else to `other`.
    #[test]
    fn handshake_failures_are_classified() {
        let wrap = |error: rustls::Error| io::Error::new(io::ErrorKind::InvalidData, error);
        let cases = [
            (
                wrap(rustls::Error::InvalidMessage(
                    rustls::InvalidMessage::InvalidContentType,
                )),
                HandshakeFailure::NotTls,
            ),
            (
                wrap(rustls::Error::NoCertificatesPresented),
                HandshakeFailure::NoClientCertificate,
            ),
            (
                wrap(rustls::Error::InvalidCertificate(
                    rustls::CertificateError::UnknownIssuer,
                )),
                HandshakeFailure::BadClientCertificate,
            ),
            (
                wrap(rustls::Error::AlertReceived(
                    rustls::AlertDescription::UnknownCA,
                )),
                HandshakeFailure::PeerRejected,
            ),
            (
                wrap(rustls::Error::PeerIncompatible(
                    rustls::PeerIncompatible::Tls12NotOffered,
                )),
                HandshakeFailure::Incompatible,
            ),
            (wrap(rustls::Error::DecryptError), HandshakeFailure::Other),
            (
                io::Error::from(io::ErrorKind::UnexpectedEof),
                HandshakeFailure::Closed,
            ),
        ];
        for (error, reason) in cases {
            assert_eq!(HandshakeFailure::of(&error), reason, "{error}");
        }
        let labels: std::collections::BTreeSet<_> =
            HandshakeFailure::ALL.iter().map(|f| f.label()).collect();
        assert_eq!(
            labels.len(),
            HandshakeFailure::ALL.len(),
            "labels are distinct"
        );
    }
}
