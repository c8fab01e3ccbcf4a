//! TLS and mTLS on both OTLP receivers, with the OpenTelemetry Rust SDK as the client (its
//! tonic exporter with a `ClientTlsConfig`; its HTTP exporter over a rustls client), and
//! certificate rotation on disk while a sender keeps sending.
//!
//! Every certificate is made here with rcgen: a CA the clients trust, a second CA they do
//! not, server certificates for 127.0.0.1 and client certificates from both CAs.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use opentelemetry::trace::{Tracer, TracerProvider as _};
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig, WithTonicConfig};
use opentelemetry_sdk::trace::{BatchConfigBuilder, BatchSpanProcessor, SdkTracerProvider};
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose, SanType,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tailgate::service::Gateway;
use tonic::transport::{Certificate, ClientTlsConfig, Identity};

use crate::support::{self, OtlpSink, SinkBehavior};

/// Spans each client that should get through sends.
const SPANS: usize = 200;

/// Spans each client that should be refused sends.
const REFUSED_SPANS: usize = 10;

// === certificates ===

/// A certificate authority made for one test.
struct Ca {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

/// A certificate issued by a [`Ca`], with its key, both PEM, and the certificate's DER.
#[derive(Clone)]
struct Leaf {
    cert_pem: String,
    key_pem: String,
    der: Vec<u8>,
}

impl Ca {
    fn new(name: &str) -> Self {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let key = KeyPair::generate().expect("CA key");
        Self {
            issuer: CertifiedIssuer::self_signed(params, key).expect("CA certificate"),
        }
    }

    fn pem(&self) -> String {
        self.issuer.pem()
    }

    /// A server certificate for 127.0.0.1 and localhost with serial number `serial`.
    fn server(&self, serial: u64) -> Leaf {
        self.leaf(serial, ExtendedKeyUsagePurpose::ServerAuth)
    }

    /// A client certificate.
    fn client(&self, serial: u64) -> Leaf {
        self.leaf(serial, ExtendedKeyUsagePurpose::ClientAuth)
    }

    fn leaf(&self, serial: u64, usage: ExtendedKeyUsagePurpose) -> Leaf {
        let mut params = CertificateParams::new(vec!["localhost".to_owned()]).expect("leaf params");
        params
            .subject_alt_names
            .push(SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST)));
        params
            .distinguished_name
            .push(DnType::CommonName, format!("leaf {serial}"));
        params.serial_number = Some(serial.into());
        params.extended_key_usages = vec![usage];
        let key = KeyPair::generate().expect("leaf key");
        let cert = params
            .signed_by(&key, &self.issuer)
            .expect("leaf certificate");
        Leaf {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            der: cert.der().to_vec(),
        }
    }
}

/// The serial number in a DER certificate: `Certificate -> TBSCertificate -> [0] version
/// (optional) -> serialNumber INTEGER`, read as an unsigned number.
fn serial_of(der: &[u8]) -> u64 {
    /// One DER element: its tag, its content and what follows it.
    fn element(input: &[u8]) -> (u8, &[u8], &[u8]) {
        let tag = input[0];
        let first = input[1] as usize;
        let (len, header) = if first < 0x80 {
            (first, 2)
        } else {
            let octets = first & 0x7f;
            let len = input[2..2 + octets]
                .iter()
                .fold(0usize, |len, byte| len << 8 | *byte as usize);
            (len, 2 + octets)
        };
        (tag, &input[header..header + len], &input[header + len..])
    }
    let (_, certificate, _) = element(der);
    let (_, tbs, _) = element(certificate);
    let (tag, content, rest) = element(tbs);
    let serial = if tag == 0xa0 {
        let (tag, serial, _) = element(rest);
        assert_eq!(tag, 0x02, "serialNumber is an INTEGER");
        serial
    } else {
        content
    };
    serial
        .iter()
        .fold(0u64, |value, byte| value << 8 | u64::from(*byte))
}

/// Replaces `path` with `content` at once (written beside it, then renamed over it, as
/// Kubernetes updates a mounted Secret), so a reload sees the old content or the new, and
/// the broken states a test writes are exactly the ones it means.
fn write(path: &Path, content: &str) {
    let staged = PathBuf::from(format!("{}.staged", path.display()));
    std::fs::write(&staged, content).expect("write a TLS file");
    std::fs::rename(&staged, path).expect("replace a TLS file");
}

/// The server's files in a temporary directory.
struct ServerFiles {
    _dir: tempfile::TempDir,
    cert: PathBuf,
    key: PathBuf,
    client_ca: PathBuf,
}

impl ServerFiles {
    fn new(server: &Leaf, client_ca: Option<&Ca>) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let files = Self {
            cert: dir.path().join("tls.crt"),
            key: dir.path().join("tls.key"),
            client_ca: dir.path().join("client-ca.crt"),
            _dir: dir,
        };
        write(&files.cert, &server.cert_pem);
        write(&files.key, &server.key_pem);
        if let Some(ca) = client_ca {
            write(&files.client_ca, &ca.pem());
        }
        files
    }

    /// The `tls` mapping of both receivers, as YAML flow.
    fn yaml(&self, mtls: bool, reload_interval: Option<&str>) -> String {
        let mut yaml = format!(
            "{{cert_file: '{}', key_file: '{}'",
            self.cert.display(),
            self.key.display()
        );
        if mtls {
            yaml.push_str(&format!(", client_ca_file: '{}'", self.client_ca.display()));
        }
        if let Some(interval) = reload_interval {
            yaml.push_str(&format!(", reload_interval: {interval}"));
        }
        yaml.push('}');
        yaml
    }
}

/// A gateway exporting to `sink`, both receivers serving TLS with `tls` (YAML flow).
async fn start_gateway(sink: &OtlpSink, tls: &str) -> Gateway {
    let base = support::gateway_config(sink.addr, "");
    let overlay = format!(
        "
receivers:
  otlp:
    protocols:
      grpc:
        tls: {tls}
      http:
        tls: {tls}
"
    );
    let config = tailgate::config::load_str(&[&base, &overlay]).expect("test config is valid");
    Gateway::start(config).await.expect("gateway starts")
}

// === clients ===

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Wire {
    Grpc,
    Http,
}

impl Wire {
    fn transport(self) -> &'static str {
        match self {
            Self::Grpc => "transport=\"grpc\"",
            Self::Http => "transport=\"http\"",
        }
    }

    fn addr(self, gateway: &Gateway) -> SocketAddr {
        match self {
            Self::Grpc => support::grpc_addr(gateway),
            Self::Http => support::http_addr(gateway),
        }
    }
}

/// How a client connects.
#[derive(Clone, Default)]
struct ClientTls {
    /// Plaintext when false.
    tls: bool,
    /// The CA certificate (PEM) the client trusts.
    trust: Option<String>,
    /// The client certificate it presents.
    identity: Option<Leaf>,
}

impl ClientTls {
    fn trusting(ca: &Ca) -> Self {
        Self {
            tls: true,
            trust: Some(ca.pem()),
            identity: None,
        }
    }

    fn with_identity(mut self, leaf: &Leaf) -> Self {
        self.identity = Some(leaf.clone());
        self
    }

    /// A rustls client configuration offering `alpn`.
    fn rustls(&self, alpn: &[&[u8]]) -> rustls::ClientConfig {
        let mut roots = rustls::RootCertStore::empty();
        if let Some(trust) = &self.trust {
            for cert in CertificateDer::pem_slice_iter(trust.as_bytes()) {
                roots.add(cert.expect("PEM")).expect("CA certificate");
            }
        }
        let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots);
        let mut config = match &self.identity {
            Some(leaf) => builder
                .with_client_auth_cert(
                    vec![CertificateDer::from(leaf.der.clone())],
                    PrivateKeyDer::from_pem_slice(leaf.key_pem.as_bytes()).expect("key"),
                )
                .expect("client certificate"),
            None => builder.with_no_client_auth(),
        };
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        config
    }
}

/// The SDK's HTTP exporter over hyper and rustls. The exporter calls it from its own
/// thread, outside any runtime, so each request runs on the test's runtime.
#[derive(Clone)]
struct TlsHttpClient {
    client: Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
    runtime: tokio::runtime::Handle,
}

impl std::fmt::Debug for TlsHttpClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TlsHttpClient")
    }
}

impl TlsHttpClient {
    fn new(tls: &ClientTls, runtime: tokio::runtime::Handle) -> Self {
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            // hyper-rustls sets ALPN itself (h2, http/1.1).
            .with_tls_config(tls.rustls(&[]))
            .https_or_http()
            .enable_http1()
            .enable_http2()
            .build();
        Self {
            client: Client::builder(TokioExecutor::new()).build(connector),
            runtime,
        }
    }
}

#[async_trait::async_trait]
impl opentelemetry_http::HttpClient for TlsHttpClient {
    async fn send_bytes(
        &self,
        request: http::Request<Bytes>,
    ) -> Result<http::Response<Bytes>, opentelemetry_http::HttpError> {
        let client = self.client.clone();
        let answer = self.runtime.spawn(async move {
            let (parts, body) = request.into_parts();
            let response = client
                .request(http::Request::from_parts(parts, Full::new(body)))
                .await?;
            let (parts, body) = response.into_parts();
            let body = body.collect().await?.to_bytes();
            Ok::<_, opentelemetry_http::HttpError>(http::Response::from_parts(parts, body))
        });
        answer.await?
    }
}

/// An SDK tracer provider exporting over `wire` to `addr` as `tls` says, with a queue that
/// holds `capacity` spans (the SDK drops spans silently beyond it).
fn provider(
    wire: Wire,
    addr: SocketAddr,
    tls: &ClientTls,
    capacity: usize,
    runtime: tokio::runtime::Handle,
) -> SdkTracerProvider {
    let scheme = if tls.tls { "https" } else { "http" };
    let exporter = match wire {
        Wire::Grpc => {
            let builder = opentelemetry_otlp::SpanExporter::builder()
                .with_tonic()
                .with_endpoint(format!("{scheme}://{addr}"));
            let builder = if tls.tls {
                let mut config = ClientTlsConfig::new().domain_name("127.0.0.1");
                if let Some(trust) = &tls.trust {
                    config = config.ca_certificate(Certificate::from_pem(trust));
                }
                if let Some(leaf) = &tls.identity {
                    config = config.identity(Identity::from_pem(&leaf.cert_pem, &leaf.key_pem));
                }
                builder.with_tls_config(config)
            } else {
                builder
            };
            builder.build()
        }
        Wire::Http => opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(format!("{scheme}://{addr}/v1/traces"))
            .with_http_client(TlsHttpClient::new(tls, runtime))
            .build(),
    }
    .expect("exporter builds");
    let processor = BatchSpanProcessor::builder(exporter)
        .with_batch_config(
            BatchConfigBuilder::default()
                .with_max_queue_size(capacity + 1)
                .with_max_export_batch_size(100)
                .with_scheduled_delay(Duration::from_millis(20))
                .build(),
        )
        .build();
    SdkTracerProvider::builder()
        .with_span_processor(processor)
        .build()
}

/// Sends `spans` spans with the SDK over `wire` and waits until the SDK has tried to export
/// them all. Whether they arrived is for the caller to check at the sink.
async fn send(wire: Wire, addr: SocketAddr, tls: ClientTls, spans: usize) {
    let runtime = tokio::runtime::Handle::current();
    tokio::task::spawn_blocking(move || {
        let _guard = runtime.enter();
        let provider = provider(wire, addr, &tls, spans, runtime.clone());
        let tracer = provider.tracer("receiver-tls");
        for i in 0..spans {
            tracer.in_span(format!("span {i}"), |_| {});
        }
        // Export failures are what some tests expect; the sink says what arrived.
        let _ = provider.force_flush();
        let _ = provider.shutdown();
    })
    .await
    .expect("SDK thread");
}

/// The certificate (DER) a new TLS handshake with `addr` is presented, trusting `ca`.
async fn presented_certificate(addr: SocketAddr, ca: &Ca) -> Vec<u8> {
    let config = ClientTls::trusting(ca).rustls(&[b"h2"]);
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let name = ServerName::try_from("127.0.0.1").expect("server name");
    let tls = connector.connect(name, tcp).await.expect("handshake");
    let (_, session) = tls.get_ref();
    session
        .peer_certificates()
        .and_then(|certs| certs.first())
        .expect("the server presents a certificate")
        .to_vec()
}

// === metrics ===

fn accepted(metrics: &str, wire: Wire) -> f64 {
    support::metric_value(
        metrics,
        "otelcol_receiver_accepted_spans_total",
        &[wire.transport()],
    )
}

fn handshake_failures(metrics: &str, wire: Wire, reason: &str) -> f64 {
    let reason = format!("reason=\"{reason}\"");
    support::metric_value(
        metrics,
        "tailgate_receiver_tls_handshake_failures_total",
        &[wire.transport(), &reason],
    )
}

/// Reloads of the gRPC receiver's files with `result`.
fn reloads(metrics: &str, result: &str) -> f64 {
    reloads_on(metrics, Wire::Grpc, result)
}

/// Waits until a handshake failure with `reason` is counted on `wire`'s receiver.
async fn wait_for_failure(gateway: &Gateway, wire: Wire, reason: &str) -> bool {
    support::eventually(Duration::from_secs(20), || async {
        handshake_failures(&support::scrape(gateway).await, wire, reason) >= 1.0
    })
    .await
}

// === tests ===

/// Scenario: both receivers serve TLS with a certificate from a CA; over gRPC and over
/// HTTP, the SDK trusting that CA sends 200 spans, the SDK trusting only another CA sends
/// 10, and the SDK in plaintext sends 10.
/// Guarantees: every span of the trusting clients arrives at the sink and is counted as
/// accepted; nothing of the others does; their handshakes are counted as peer_rejected
/// (the client refused the certificate) and not_tls.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_serves_clients_that_trust_its_ca() {
    let ca = Ca::new("tailgate test CA");
    let other = Ca::new("another CA");
    let files = ServerFiles::new(&ca.server(1), None);
    let sink = OtlpSink::start(SinkBehavior::Accept).await;
    let gateway = start_gateway(&sink, &files.yaml(false, None)).await;

    for (round, wire) in [Wire::Grpc, Wire::Http].into_iter().enumerate() {
        let addr = wire.addr(&gateway);
        send(wire, addr, ClientTls::trusting(&ca), SPANS).await;
        let expected = SPANS * (round + 1);
        let arrived = support::eventually(Duration::from_secs(30), || async {
            sink.handle.span_count() >= expected
        })
        .await;
        assert!(
            arrived,
            "{wire:?}: {} of {expected} spans arrived",
            sink.handle.span_count()
        );

        send(wire, addr, ClientTls::trusting(&other), REFUSED_SPANS).await;
        assert!(
            wait_for_failure(&gateway, wire, "peer_rejected").await,
            "{wire:?}: a client not trusting the certificate is counted"
        );
        send(wire, addr, ClientTls::default(), REFUSED_SPANS).await;
        assert!(
            wait_for_failure(&gateway, wire, "not_tls").await,
            "{wire:?}: a plaintext client is counted"
        );
        let metrics = support::scrape(&gateway).await;
        assert_eq!(accepted(&metrics, wire), SPANS as f64, "{wire:?}");
        assert!(
            support::metric_value(
                &metrics,
                "tailgate_receiver_tls_handshakes_total",
                &[wire.transport()]
            ) >= 1.0
        );
    }
    let report = gateway.shutdown().await;
    assert_eq!(report.dropped_spans, 0);
    assert_eq!(
        sink.handle.span_count(),
        2 * SPANS,
        "only the trusting clients' spans arrive, each once"
    );
}

/// Scenario: both receivers require client certificates from a CA (`client_ca_file`); over
/// gRPC and over HTTP, the SDK sends 10 spans with no client certificate, 10 with one from
/// another CA, then 200 with one from the right CA.
/// Guarantees: only the last client's spans arrive, all of them; the first two handshakes
/// are counted as no_client_certificate and bad_client_certificate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mtls_refuses_clients_without_a_certificate_from_its_ca() {
    let ca = Ca::new("tailgate test CA");
    let clients = Ca::new("client CA");
    let other = Ca::new("another CA");
    let files = ServerFiles::new(&ca.server(1), Some(&clients));
    let sink = OtlpSink::start(SinkBehavior::Accept).await;
    let gateway = start_gateway(&sink, &files.yaml(true, None)).await;

    for (round, wire) in [Wire::Grpc, Wire::Http].into_iter().enumerate() {
        let addr = wire.addr(&gateway);
        send(wire, addr, ClientTls::trusting(&ca), REFUSED_SPANS).await;
        assert!(
            wait_for_failure(&gateway, wire, "no_client_certificate").await,
            "{wire:?}: a client without a certificate is refused and counted"
        );
        let stranger = ClientTls::trusting(&ca).with_identity(&other.client(7));
        send(wire, addr, stranger, REFUSED_SPANS).await;
        assert!(
            wait_for_failure(&gateway, wire, "bad_client_certificate").await,
            "{wire:?}: a certificate from another CA is refused and counted"
        );
        assert_eq!(
            accepted(&support::scrape(&gateway).await, wire),
            0.0,
            "{wire:?}: nothing of the refused clients is accepted"
        );

        let member = ClientTls::trusting(&ca).with_identity(&clients.client(8));
        send(wire, addr, member, SPANS).await;
        let expected = SPANS * (round + 1);
        let arrived = support::eventually(Duration::from_secs(30), || async {
            sink.handle.span_count() >= expected
        })
        .await;
        assert!(
            arrived,
            "{wire:?}: {} of {expected} spans arrived",
            sink.handle.span_count()
        );
        assert_eq!(
            accepted(&support::scrape(&gateway).await, wire),
            SPANS as f64
        );
    }
    let report = gateway.shutdown().await;
    assert_eq!(report.dropped_spans, 0);
    assert_eq!(sink.handle.span_count(), 2 * SPANS);
}

/// Scenario: the gRPC receiver serves certificate 1 with `reload_interval: 50ms` while the
/// SDK keeps sending spans over one TLS connection. The files are then rotated the way a
/// careless tool would: half of certificate 2 written, then all of it beside the old key,
/// then its key. A new client sends after the rotation.
/// Guarantees: the two broken states are counted as failed reloads and new handshakes keep
/// being presented certificate 1 meanwhile; once the pair matches, new handshakes are
/// presented certificate 2 (its serial read from the handshake); the connection in flight
/// is untouched, and every span the receiver accepted reaches the sink: sink count ==
/// accepted count == spans sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotation_keeps_every_span_and_new_handshakes_see_the_new_certificate() {
    let ca = Ca::new("tailgate test CA");
    let first = ca.server(1001);
    let second = ca.server(2002);
    let files = ServerFiles::new(&first, None);
    let sink = OtlpSink::start(SinkBehavior::Accept).await;
    let gateway = start_gateway(&sink, &files.yaml(false, Some("50ms"))).await;
    let addr = support::grpc_addr(&gateway);
    assert_eq!(serial_of(&presented_certificate(addr, &ca).await), 1001);

    // The sender: bounded in spans and time, paced so that it is still sending while the
    // files are rotated, stopped once the rotation is checked.
    const MAX_SPANS: usize = 50_000;
    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicUsize::new(0));
    let runtime = tokio::runtime::Handle::current();
    let sender = {
        let (stop, sent, tls) = (stop.clone(), sent.clone(), ClientTls::trusting(&ca));
        tokio::task::spawn_blocking(move || {
            let _guard = runtime.enter();
            let provider = provider(Wire::Grpc, addr, &tls, MAX_SPANS, runtime.clone());
            let tracer = provider.tracer("rotation");
            let deadline = std::time::Instant::now() + Duration::from_secs(60);
            while !stop.load(Ordering::Relaxed)
                && sent.load(Ordering::Relaxed) < MAX_SPANS
                && std::time::Instant::now() < deadline
            {
                for _ in 0..50 {
                    tracer.in_span("rotating", |_| {});
                }
                sent.fetch_add(50, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(5));
            }
            provider.force_flush().expect("every span exported");
            provider.shutdown().expect("SDK shutdown");
        })
    };
    let sending = support::eventually(Duration::from_secs(20), || async {
        sink.handle.span_count() > 0
    })
    .await;
    assert!(sending, "spans flow over TLS before the rotation");

    let half = &second.cert_pem[..second.cert_pem.len() / 2];
    write(&files.cert, half);
    let counted = support::eventually(Duration::from_secs(20), || async {
        reloads(&support::scrape(&gateway).await, "failure") >= 1.0
    })
    .await;
    assert!(counted, "a half-written certificate is a failed reload");
    assert_eq!(serial_of(&presented_certificate(addr, &ca).await), 1001);

    write(&files.cert, &second.cert_pem);
    let counted = support::eventually(Duration::from_secs(20), || async {
        reloads(&support::scrape(&gateway).await, "failure") >= 2.0
    })
    .await;
    assert!(
        counted,
        "a certificate beside the old key is a failed reload"
    );
    assert_eq!(serial_of(&presented_certificate(addr, &ca).await), 1001);

    write(&files.key, &second.key_pem);
    let rotated = support::eventually(Duration::from_secs(20), || async {
        serial_of(&presented_certificate(addr, &ca).await) == 2002
    })
    .await;
    assert!(rotated, "new handshakes see the new certificate");
    assert_eq!(presented_certificate(addr, &ca).await, second.der);
    let metrics = support::scrape(&gateway).await;
    assert_eq!(reloads(&metrics, "success"), 1.0);
    assert_eq!(reloads(&metrics, "failure"), 2.0);

    stop.store(true, Ordering::Relaxed);
    sender.await.expect("sender thread");
    let sent = sent.load(Ordering::Relaxed);
    assert!(
        sent < MAX_SPANS,
        "the sender was still sending when stopped"
    );
    send(Wire::Grpc, addr, ClientTls::trusting(&ca), SPANS).await;
    let total = sent + SPANS;
    let arrived = support::eventually(Duration::from_secs(30), || async {
        sink.handle.span_count() >= total
    })
    .await;
    let metrics = support::scrape(&gateway).await;
    let report = gateway.shutdown().await;
    assert!(
        arrived,
        "{} of {total} spans arrived",
        sink.handle.span_count()
    );
    assert_eq!(report.dropped_spans, 0);
    assert_eq!(accepted(&metrics, Wire::Grpc), total as f64);
    assert_eq!(
        sink.handle.span_count(),
        total,
        "sink count == accepted count"
    );
    assert_eq!(
        handshake_failures(&metrics, Wire::Grpc, "closed")
            + handshake_failures(&metrics, Wire::Grpc, "other"),
        0.0
    );
}

/// Scenario: `tailgate-sink` serving TLS (`--tls-cert`, `--tls-key`) behind a gateway whose
/// receivers serve TLS and whose exporter trusts the sink's CA; the load generator, with
/// `--tls-ca`, sends 1,000 spans over gRPC and 1,000 over HTTP/protobuf to the gateway.
/// Guarantees: the load generator counts every span accepted, and the sink counts every
/// span it received over TLS: the bench tools measure a TLS path end to end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loadgen_and_sink_speak_tls() {
    use tailgate::loadgen::{GeneratorConfig, LoadConfig, Protocol, SendConfig};

    let ca = Ca::new("tailgate test CA");
    let gateway_files = ServerFiles::new(&ca.server(1), None);
    let sink_files = ServerFiles::new(&ca.server(2), None);
    let ca_file = gateway_files.cert.with_file_name("ca.crt");
    write(&ca_file, &ca.pem());
    let stats = sink_files.cert.with_file_name("stats.json");

    // The sink needs a port before it starts: take one from the OS and hand it over.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free port")
        .port();
    let mut sink = std::process::Command::new(env!("CARGO_BIN_EXE_tailgate-sink"))
        .arg("--listen")
        .arg(format!("127.0.0.1:{port}"))
        .arg("--tls-cert")
        .arg(&sink_files.cert)
        .arg("--tls-key")
        .arg(&sink_files.key)
        .arg("--stats-file")
        .arg(&stats)
        .arg("--max-time")
        .arg("2m")
        .spawn()
        .expect("tailgate-sink starts");

    let config = format!(
        r#"
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:0
        tls: {tls}
      http:
        endpoint: 127.0.0.1:0
        tls: {tls}
processors:
  batch:
    send_batch_size: 512
    timeout: 50ms
exporters:
  otlp/sink:
    endpoint: https://127.0.0.1:{port}
    tls:
      ca_file: '{ca}'
service:
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [otlp/sink]
  telemetry:
    metrics:
      address: 127.0.0.1:0
"#,
        tls = gateway_files.yaml(false, None),
        ca = ca_file.display(),
    );
    let gateway = support::start_gateway(&config).await;

    let mut sent = 0;
    for (protocol, addr) in [
        (Protocol::Grpc, support::grpc_addr(&gateway)),
        (Protocol::HttpProtobuf, support::http_addr(&gateway)),
    ] {
        let load = LoadConfig {
            generator: GeneratorConfig::default(),
            send: SendConfig {
                protocol,
                endpoint: addr.to_string(),
                gzip: false,
                timeout: Duration::from_secs(10),
                tls_ca: Some(ca_file.clone()),
                token: None,
            },
            connections: 2,
            rate: None,
            spans: Some(1_000),
            duration: None,
            batch_spans: 100,
            seed: 7,
            split_ratio: 0.0,
            lateness: Duration::ZERO,
            max_attempts: 8,
            expect: None,
            progress: false,
        };
        let summary = tailgate::loadgen::run(load).await.expect("the load runs");
        assert!(summary.sent_spans >= 1_000, "{protocol:?}: {summary:?}");
        assert_eq!(
            summary.accepted_spans, summary.sent_spans,
            "{protocol:?}: every span accepted over TLS: {summary:?}"
        );
        sent += summary.sent_spans;
    }

    let spans_at_sink = || {
        std::fs::read_to_string(&stats)
            .ok()
            .and_then(|json| serde_json::from_str::<serde_json::Value>(&json).ok())
            .and_then(|stats| stats["spans"].as_u64())
            .unwrap_or(0)
    };
    let arrived = support::eventually(Duration::from_secs(60), || async {
        spans_at_sink() >= sent
    })
    .await;
    let report = gateway.shutdown().await;
    let _ = sink.kill();
    let _ = sink.wait();
    assert!(
        arrived,
        "{} of {sent} spans reached the sink",
        spans_at_sink()
    );
    assert_eq!(spans_at_sink(), sent);
    assert_eq!(report.dropped_spans, 0);
}

/// Scenario: a config with TLS on both receivers validates; then the key file is removed
/// before the gateway starts.
/// Guarantees: the start fails, naming the receiver, protocol and key of the missing file,
/// instead of serving one protocol without TLS or failing later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_gone_since_validation_fails_the_start() {
    let ca = Ca::new("tailgate test CA");
    let files = ServerFiles::new(&ca.server(1), None);
    let sink = OtlpSink::start(SinkBehavior::Accept).await;
    let base = support::gateway_config(sink.addr, "");
    let tls = files.yaml(false, None);
    let overlay = format!(
        "receivers: {{otlp: {{protocols: {{grpc: {{tls: {tls}}}, http: {{tls: {tls}}}}}}}}}"
    );
    let config =
        tailgate::config::load_str(&[&base, &overlay]).expect("valid while the files exist");
    std::fs::remove_file(&files.key).expect("remove the key");
    let error = match Gateway::start(config).await {
        Ok(_) => panic!("the gateway must not start without its key"),
        Err(error) => error.to_string(),
    };
    assert!(
        error.starts_with(&format!(
            "receivers.otlp.protocols.grpc.tls.key_file: cannot read {}",
            files.key.display()
        )),
        "{error}"
    );
}

/// A load generator run over TLS trusting `ca_file`: `connections` connections offering
/// `rate` spans per second, bounded by `spans` and by `duration`, each request tried once.
fn tls_load(
    protocol: tailgate::loadgen::Protocol,
    endpoint: String,
    ca_file: &Path,
    connections: usize,
    rate: f64,
    spans: u64,
    duration: Duration,
) -> tailgate::loadgen::LoadConfig {
    tailgate::loadgen::LoadConfig {
        generator: tailgate::loadgen::GeneratorConfig::default(),
        send: tailgate::loadgen::SendConfig {
            protocol,
            endpoint,
            gzip: false,
            timeout: Duration::from_secs(10),
            tls_ca: Some(ca_file.to_path_buf()),
            token: None,
        },
        connections,
        rate: Some(rate),
        spans: Some(spans),
        duration: Some(duration),
        batch_spans: 50,
        seed: 11,
        split_ratio: 0.0,
        lateness: Duration::ZERO,
        max_attempts: 1,
        expect: None,
        progress: false,
    }
}

/// Reloads of `wire`'s receiver files with `result`.
fn reloads_on(metrics: &str, wire: Wire, result: &str) -> f64 {
    let result = format!("result=\"{result}\"");
    support::metric_value(
        metrics,
        "tailgate_receiver_tls_reloads_total",
        &[wire.transport(), &result],
    )
}

/// Scenario: both receivers serve certificate 3001 with `reload_interval: 50ms` while the
/// load generator sends over TLS, over gRPC on 3 connections and over HTTP/protobuf on 2,
/// each at 1,000 spans/s (bounded: 20,000 spans, 8s); certificate 3002 is written beside
/// the old key, then its key; the load generator runs to its end on the connections it
/// opened before the rotation.
/// Guarantees: on both ports new handshakes are presented serial 3001 until the pair
/// matches and serial 3002 after the successful reload, which happens while both runs are
/// still sending; every span the load generator reports accepted reaches the sink (sink
/// count == its accepted count == the receivers' accepted counts), it reports none
/// refused or failed, and the receivers count no failed handshake.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotation_under_the_load_generator_loses_no_accepted_span() {
    use tailgate::loadgen::Protocol;

    let ca = Ca::new("tailgate test CA");
    let first = ca.server(3001);
    let second = ca.server(3002);
    let files = ServerFiles::new(&first, None);
    let ca_file = files.cert.with_file_name("ca.crt");
    write(&ca_file, &ca.pem());
    let sink = OtlpSink::start(SinkBehavior::Accept).await;
    let gateway = start_gateway(&sink, &files.yaml(false, Some("50ms"))).await;
    let wires = [Wire::Grpc, Wire::Http];
    for wire in wires {
        let addr = wire.addr(&gateway);
        assert_eq!(serial_of(&presented_certificate(addr, &ca).await), 3001);
    }

    let runs = [
        (Wire::Grpc, Protocol::Grpc, 3),
        (Wire::Http, Protocol::HttpProtobuf, 2),
    ]
    .map(|(wire, protocol, connections)| {
        let load = tls_load(
            protocol,
            wire.addr(&gateway).to_string(),
            &ca_file,
            connections,
            1_000.0,
            20_000,
            Duration::from_secs(8),
        );
        tokio::spawn(tailgate::loadgen::run(load))
    });
    let sending = support::eventually(Duration::from_secs(20), || async {
        let metrics = support::scrape(&gateway).await;
        wires.iter().all(|wire| accepted(&metrics, *wire) > 0.0)
    })
    .await;
    assert!(
        sending,
        "the load generator's spans flow over TLS on both ports"
    );

    write(&files.cert, &second.cert_pem);
    let counted = support::eventually(Duration::from_secs(20), || async {
        let metrics = support::scrape(&gateway).await;
        wires
            .iter()
            .all(|wire| reloads_on(&metrics, *wire, "failure") >= 1.0)
    })
    .await;
    assert!(
        counted,
        "a certificate beside the old key is a failed reload"
    );
    for wire in wires {
        let addr = wire.addr(&gateway);
        assert_eq!(serial_of(&presented_certificate(addr, &ca).await), 3001);
    }

    write(&files.key, &second.key_pem);
    let reloaded = support::eventually(Duration::from_secs(20), || async {
        let metrics = support::scrape(&gateway).await;
        wires
            .iter()
            .all(|wire| reloads_on(&metrics, *wire, "success") >= 1.0)
    })
    .await;
    assert!(reloaded, "the matching pair is reloaded");
    for wire in wires {
        let addr = wire.addr(&gateway);
        assert_eq!(serial_of(&presented_certificate(addr, &ca).await), 3002);
        assert_eq!(presented_certificate(addr, &ca).await, second.der);
    }
    let at_rotation = support::scrape(&gateway).await;
    assert!(
        runs.iter().all(|run| !run.is_finished()),
        "the rotation happened while the load generator was sending"
    );

    let mut expected = 0;
    for ((wire, run), before) in wires
        .into_iter()
        .zip(runs)
        .zip(wires.map(|wire| accepted(&at_rotation, wire)))
    {
        let summary = run
            .await
            .expect("load task")
            .expect("the load generator runs");
        assert!(
            summary.accepted_spans as f64 > before,
            "{wire:?}: spans were accepted after the rotation: {summary:?}"
        );
        assert_eq!(
            summary.accepted_spans, summary.sent_spans,
            "{wire:?}: every span accepted: {summary:?}"
        );
        assert_eq!(summary.refused_spans, 0, "{wire:?}: {summary:?}");
        assert_eq!(summary.failed_spans, 0, "{wire:?}: {summary:?}");
        assert_eq!(summary.errors, 0, "{wire:?}: {summary:?}");
        assert_eq!(summary.first_error, None, "{wire:?}: {summary:?}");
        expected += summary.accepted_spans as usize;
        let metrics = support::scrape(&gateway).await;
        assert_eq!(
            accepted(&metrics, wire),
            summary.accepted_spans as f64,
            "{wire:?}: the receiver accepted what the load generator saw accepted"
        );
    }

    let arrived = support::eventually(Duration::from_secs(30), || async {
        sink.handle.span_count() >= expected
    })
    .await;
    let metrics = support::scrape(&gateway).await;
    let report = gateway.shutdown().await;
    assert!(
        arrived,
        "{} of {expected} spans arrived",
        sink.handle.span_count()
    );
    assert_eq!(sink.handle.span_count(), expected, "sink count == accepted");
    assert_eq!(report.dropped_spans, 0);
    for wire in wires {
        assert_eq!(reloads_on(&metrics, wire, "success"), 1.0, "{wire:?}");
        assert_eq!(reloads_on(&metrics, wire, "failure"), 1.0, "{wire:?}");
        assert_eq!(
            support::metric_value(
                &metrics,
                "tailgate_receiver_tls_handshake_failures_total",
                &[wire.transport()]
            ),
            0.0,
            "{wire:?}: no handshake failed"
        );
    }
}

/// The base64 body of a PEM block, without its BEGIN/END lines and line breaks.
fn pem_body(pem: &str) -> String {
    pem.lines()
        .filter(|line| !line.starts_with("-----"))
        .collect::<String>()
}

/// Every 40-character run of `body` that `text` contains, `text` read with its line breaks
/// (real or escaped as `\n`) removed, so a key split over log lines is found too.
fn runs_of(body: &str, text: &str) -> Vec<String> {
    let text = text.replace("\\n", "").replace(['\n', '\r'], "");
    let body: Vec<char> = body.chars().collect();
    body.windows(40)
        .map(|run| run.iter().collect::<String>())
        .filter(|run| text.contains(run.as_str()))
        .collect()
}

/// One OTLP request of one span.
fn one_span() -> opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest {
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            scope_spans: vec![ScopeSpans {
                spans: vec![Span {
                    trace_id: vec![7; 16],
                    span_id: vec![9; 8],
                    name: "secret-check".to_owned(),
                    start_time_unix_nano: 1,
                    end_time_unix_nano: 2,
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

/// Scenario: the `tailgate` binary with TLS on both receivers (`reload_interval: 50ms`,
/// key file written here), a bearer token on gRPC and an inline htpasswd on HTTP; over
/// TLS, an export with the token, one with a wrong token, a POST with the password and one
/// with a wrong password; a plaintext request to each TLS port; then half of another key
/// written over the key file; then `tailgate print-config` of the same file, first with
/// that key (refused), then with the first key restored.
/// Guarantees: the right credentials are admitted over TLS and the spans reach the sink;
/// the plaintext handshakes and the failed reload are counted and the reload failure
/// logged; yet neither the log nor `print-config` (its output or its refusal) contains any
/// 40-character run of either
/// private key's base64 body, the token, the wrong token, the passwords' base64 forms or
/// the htpasswd hash; `print-config` shows the key as its file path.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_key_or_secret_reaches_logs_or_print_config_over_tls() {
    use base64::Engine as _;
    use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
    use prost::Message as _;
    use support::process::GatewayProcess;

    let ca = Ca::new("tailgate test CA");
    let first = ca.server(4001);
    let second = ca.server(4002);
    let files = ServerFiles::new(&first, None);
    let sink = OtlpSink::start(SinkBehavior::Accept).await;
    let token = "tok-tlslogcheck-14142";
    let wrong_token = "tok-tlswrongguess-17320";
    let password = "password";
    let wrong_password = "pw-tlswrongguess-22360";
    // {SHA} of "password".
    let hash = "{SHA}W6ph5Mm5Pz8GgiULbPgzG37mj9g=";
    let http_port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free port")
        .port();
    let tls = files.yaml(false, Some("50ms"));
    let config = format!(
        r#"
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:0
        tls: {tls}
        auth:
          authenticator: bearertokenauth
      http:
        endpoint: 127.0.0.1:{http_port}
        tls: {tls}
        auth:
          authenticator: basicauth
processors:
  batch:
    send_batch_size: 512
    timeout: 20ms
exporters:
  otlp/sink:
    endpoint: {sink}
    tls:
      insecure: true
extensions:
  bearertokenauth:
    token: {token}
  basicauth:
    htpasswd:
      inline: "alice:{hash}"
service:
  extensions: [bearertokenauth, basicauth]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [otlp/sink]
  telemetry:
    metrics:
      address: 127.0.0.1:0
"#,
        sink = sink.addr
    );
    let process = GatewayProcess::start(&config);
    let metrics = || support::reqwest_get(&process.metrics_url);

    // gRPC over TLS: the token is admitted, a wrong one refused.
    let channel = tonic::transport::Channel::from_shared(format!("https://{}", process.grpc))
        .expect("endpoint")
        .tls_config(
            ClientTlsConfig::new()
                .domain_name("127.0.0.1")
                .ca_certificate(Certificate::from_pem(ca.pem())),
        )
        .expect("TLS config")
        .connect()
        .await
        .expect("TLS connection");
    let mut client = TraceServiceClient::new(channel);
    for (value, want) in [
        (format!("Bearer {token}"), tonic::Code::Ok),
        (
            format!("Bearer {wrong_token}"),
            tonic::Code::Unauthenticated,
        ),
    ] {
        let mut call = tonic::Request::new(one_span());
        call.metadata_mut()
            .insert("authorization", value.parse().expect("metadata"));
        let code = match client.export(call).await {
            Ok(_) => tonic::Code::Ok,
            Err(status) => status.code(),
        };
        assert_eq!(code, want, "{value}");
    }

    // HTTP over TLS: the password is admitted, a wrong one refused.
    let https = TlsHttpClient::new(&ClientTls::trusting(&ca), tokio::runtime::Handle::current());
    let encode = |text: &str| base64::engine::general_purpose::STANDARD.encode(text);
    for (user_password, want) in [
        (format!("alice:{password}"), 200),
        (format!("alice:{wrong_password}"), 401),
    ] {
        let request = http::Request::post(format!("https://127.0.0.1:{http_port}/v1/traces"))
            .header("content-type", "application/x-protobuf")
            .header("authorization", format!("Basic {}", encode(&user_password)))
            .body(Full::new(Bytes::from(one_span().encode_to_vec())))
            .expect("request");
        let response = https.client.request(request).await.expect("POST over TLS");
        assert_eq!(response.status().as_u16(), want, "{user_password}");
    }
    let arrived = support::eventually(Duration::from_secs(20), || async {
        sink.handle.span_count() >= 2
    })
    .await;
    assert!(arrived, "{} of 2 spans arrived", sink.handle.span_count());

    // Plaintext to both TLS ports: failed handshakes (the answers do not matter).
    let plain_grpc = format!("http://{}", process.grpc);
    let plain_http = format!("http://127.0.0.1:{http_port}/v1/traces");
    tokio::task::spawn_blocking(move || {
        for url in [plain_grpc, plain_http] {
            let _ = reqwest::blocking::Client::new()
                .post(&url)
                .header("content-type", "application/x-protobuf")
                .body(b"plaintext".to_vec())
                .send();
        }
    })
    .await
    .expect("plaintext task");
    let counted = support::eventually(Duration::from_secs(20), || async {
        let text = metrics().await.1;
        [Wire::Grpc, Wire::Http]
            .into_iter()
            .all(|wire| handshake_failures(&text, wire, "not_tls") >= 1.0)
    })
    .await;
    assert!(counted, "plaintext handshakes are counted on both ports");

    // A half-written key: a failed reload, logged.
    write(&files.key, &second.key_pem[..second.key_pem.len() / 2]);
    let failed = support::eventually(Duration::from_secs(20), || async {
        reloads(&metrics().await.1, "failure") >= 1.0
    })
    .await;
    assert!(failed, "a half-written key is a failed reload");
    assert_eq!(reloads(&metrics().await.1, "success"), 0.0);

    process.sigterm();
    let (status, log) = process.wait(Duration::from_secs(30)).await;
    assert!(status.is_some_and(|s| s.success()), "exit: {status:?}");
    let log = log.join("\n");
    assert!(
        log.contains("receiver.tls.reload_failed") && log.contains("receiver.auth.refused"),
        "the failed reload and the refusals are logged:\n{log}"
    );

    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("config.yaml");
    std::fs::write(&path, &config).expect("write config");
    let print_config = || support::process::print_config(&path);
    // With the half-written key still in place, print-config refuses the config; its
    // error is searched too.
    let refused = print_config();
    assert!(!refused.status.success(), "{refused:?}");
    let refusal = String::from_utf8_lossy(&refused.stderr).into_owned();
    assert!(refusal.contains("key_file"), "{refusal}");
    write(&files.key, &first.key_pem);
    let output = print_config();
    assert!(output.status.success(), "{output:?}");
    let printed = String::from_utf8_lossy(&output.stdout);
    let key_path = files.key.display().to_string();
    assert!(
        printed
            .lines()
            .any(|line| line.contains("key_file") && line.contains(&key_path)),
        "the key appears as its path:\n{printed}"
    );

    // The search finds a key where it is, split over lines or not.
    assert!(!runs_of(&pem_body(&first.key_pem), &first.key_pem).is_empty());
    assert!(!runs_of(&pem_body(&first.key_pem), &format!("{:?}", first.key_pem)).is_empty());
    for (what, text) in [
        ("the log", &log),
        ("print-config", &printed.to_string()),
        ("print-config's refusal", &refusal),
    ] {
        for (key, pem) in [("key 4001", &first.key_pem), ("key 4002", &second.key_pem)] {
            let found = runs_of(&pem_body(pem), text);
            assert!(found.is_empty(), "{key} in {what}: {found:?}\n{text}");
        }
        for secret in [
            token.to_owned(),
            wrong_token.to_owned(),
            wrong_password.to_owned(),
            hash.to_owned(),
            "W6ph5Mm5Pz8GgiULbPgzG37mj9g".to_owned(),
            encode(&format!("alice:{password}")),
            encode(&format!("alice:{wrong_password}")),
        ] {
            assert!(!text.contains(&secret), "{secret} in {what}:\n{text}");
        }
    }
}
