//! `tailgate-sink`: an OTLP/gRPC trace sink for load benches. It accepts every
//! `TraceService/Export` call, counts requests, spans, root spans and ERROR spans with
//! tailgate's wire reader (no decode into objects, so it costs little CPU beside the
//! process being measured), and discards them.
//!
//! It measures, for each root span, the delay from its end time to its arrival. The load
//! generator ends each trace's root when it generates the trace, so for a gateway under
//! test this is the time the trace spends inside it (batching, decision wait, export),
//! plus the loadgen's own queueing. (Child spans end earlier, so their delay would mostly
//! measure the trace's own duration; they are not counted.)
//!
//! Counts go to `--stats-file` as JSON every second and on exit (SIGTERM or SIGINT), and
//! to stdout on exit.
//!
//! With `--tls-cert` and `--tls-key` it serves gRPC over TLS (ALPN `h2`), so that a
//! gateway's TLS exporter can be measured.

use std::convert::Infallible;
use std::io::Read;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use clap::Parser;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde::Serialize;
use tailgate::config::{ServerTlsFiles, TlsServerConfig, TlsVersion};
use tailgate::otlp::parse_traces_request;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

/// An OTLP/gRPC sink that counts spans and discards them.
#[derive(Debug, Parser)]
#[command(name = "tailgate-sink", version)]
struct Args {
    /// Where to listen (loopback by default).
    #[arg(long, default_value = "127.0.0.1:4317")]
    listen: SocketAddr,
    /// Write the counts here as JSON, every second and on exit.
    #[arg(long, value_name = "FILE")]
    stats_file: Option<PathBuf>,
    /// Exit by itself after this long (a bound for scripts that might not stop it).
    #[arg(long, default_value = "1h", value_parser = humantime::parse_duration)]
    max_time: Duration,
    /// Serve TLS with the PEM certificate chain in FILE (with --tls-key).
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The PEM private key of --tls-cert.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
}

/// The TLS acceptor for `--tls-cert` and `--tls-key`, loaded as the gateway's receivers load
/// theirs; the error names the option whose file is at fault.
fn tls_acceptor(cert: &Path, key: &Path) -> Result<TlsAcceptor, String> {
    let settings = TlsServerConfig {
        cert_file: cert.to_owned(),
        key_file: key.to_owned(),
        client_ca_file: None,
        min_version: TlsVersion::Tls12,
        max_version: None,
        reload_interval: None,
    };
    let config = ServerTlsFiles::read(&settings)
        .server_config(&settings, &[b"h2"])
        .map_err(|error| {
            let option = if error.key == "key_file" {
                "--tls-key"
            } else {
                "--tls-cert"
            };
            format!("{option}: {}", error.message)
        })?;
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// Serves one connection (plaintext or TLS) as HTTP/2.
async fn serve_connection<IO>(io: IO, state: Arc<State>)
where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let service = service_fn(move |request| handle(request, state.clone()));
    let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
        .serve_connection(TokioIo::new(io), service)
        .await;
}

/// Delay histogram: one bucket per millisecond up to a minute, the last one for more.
const DELAY_BUCKETS: usize = 60_001;

struct State {
    requests: AtomicU64,
    spans: AtomicU64,
    root_spans: AtomicU64,
    error_spans: AtomicU64,
    bytes: AtomicU64,
    invalid: AtomicU64,
    /// Milliseconds from root span end to arrival. A mutex is fine: one short critical section
    /// per request, not per span.
    delays: Mutex<Vec<u64>>,
}

#[derive(Serialize)]
struct Stats {
    requests: u64,
    spans: u64,
    root_spans: u64,
    error_spans: u64,
    bytes: u64,
    invalid_requests: u64,
    delay_ms_p50: u64,
    delay_ms_p99: u64,
    delay_ms_max: u64,
}

impl State {
    fn stats(&self) -> Stats {
        let (p50, p99, max) = match self.delays.lock() {
            Ok(delays) => {
                let total: u64 = delays.iter().sum();
                let quantile = |q: f64| {
                    let want = ((total as f64) * q).ceil() as u64;
                    let mut seen = 0;
                    for (ms, n) in delays.iter().enumerate() {
                        seen += n;
                        if seen >= want.max(1) {
                            return ms as u64;
                        }
                    }
                    0
                };
                let max = delays.iter().rposition(|n| *n > 0).unwrap_or(0) as u64;
                (quantile(0.5), quantile(0.99), max)
            }
            Err(_) => (0, 0, 0),
        };
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        Stats {
            requests: load(&self.requests),
            spans: load(&self.spans),
            root_spans: load(&self.root_spans),
            error_spans: load(&self.error_spans),
            bytes: load(&self.bytes),
            invalid_requests: load(&self.invalid),
            delay_ms_p50: p50,
            delay_ms_p99: p99,
            delay_ms_max: max,
        }
    }

    /// Counts one gRPC message (an encoded `ExportTraceServiceRequest`).
    fn count(&self, message: Bytes) -> bool {
        let Ok(resources) = parse_traces_request(&message) else {
            return false;
        };
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        let mut local = Vec::new();
        let (mut spans, mut roots, mut errors) = (0, 0, 0);
        for rs in &resources {
            for ss in &rs.scope_spans {
                for span in &ss.spans {
                    spans += 1;
                    errors += u64::from(span.status_code == 2);
                    if span.parent_span_id.is_none() {
                        roots += 1;
                        let ms = now.saturating_sub(span.end_time_unix_nano) / 1_000_000;
                        local.push((ms as usize).min(DELAY_BUCKETS - 1));
                    }
                }
            }
        }
        if let Ok(mut delays) = self.delays.lock() {
            for ms in local {
                delays[ms] += 1;
            }
        }
        self.requests.fetch_add(1, Ordering::Relaxed);
        self.spans.fetch_add(spans, Ordering::Relaxed);
        self.root_spans.fetch_add(roots, Ordering::Relaxed);
        self.error_spans.fetch_add(errors, Ordering::Relaxed);
        self.bytes
            .fetch_add(message.len() as u64, Ordering::Relaxed);
        true
    }
}

/// Splits a gRPC request body into messages, decompressing per `grpc-encoding`.
fn messages(mut body: Bytes, encoding: Option<&str>) -> Option<Vec<Bytes>> {
    let mut out = Vec::new();
    while !body.is_empty() {
        if body.len() < 5 {
            return None;
        }
        let compressed = body[0] == 1;
        let len = u32::from_be_bytes([body[1], body[2], body[3], body[4]]) as usize;
        if body.len() < 5 + len {
            return None;
        }
        let message = body.slice(5..5 + len);
        body = body.slice(5 + len..);
        if !compressed {
            out.push(message);
            continue;
        }
        let mut plain = Vec::new();
        match encoding {
            Some("gzip") => {
                flate2::read::GzDecoder::new(&message[..])
                    .read_to_end(&mut plain)
                    .ok()?;
            }
            Some("zstd") => plain = zstd::decode_all(&message[..]).ok()?,
            _ => return None,
        }
        out.push(Bytes::from(plain));
    }
    Some(out)
}

type Body = StreamBody<tokio_stream::Iter<std::vec::IntoIter<Result<Frame<Bytes>, Infallible>>>>;

async fn handle(
    request: http::Request<Incoming>,
    state: Arc<State>,
) -> Result<http::Response<Body>, Infallible> {
    let encoding = request
        .headers()
        .get("grpc-encoding")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let ok = match request.into_body().collect().await {
        Ok(body) => match messages(body.to_bytes(), encoding.as_deref()) {
            Some(messages) => messages.into_iter().all(|m| state.count(m)),
            None => false,
        },
        Err(_) => false,
    };
    if !ok {
        state.invalid.fetch_add(1, Ordering::Relaxed);
    }
    let mut trailers = http::HeaderMap::new();
    trailers.insert(
        "grpc-status",
        http::HeaderValue::from_static(if ok { "0" } else { "3" }),
    );
    let mut frames = Vec::with_capacity(2);
    if ok {
        // An empty ExportTraceServiceResponse: uncompressed, zero length.
        frames.push(Ok(Frame::data(Bytes::from_static(&[0, 0, 0, 0, 0]))));
    }
    frames.push(Ok(Frame::trailers(trailers)));
    let body = StreamBody::new(tokio_stream::iter(frames));
    let mut response = http::Response::new(body);
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/grpc"),
    );
    Ok(response)
}

fn write_stats(state: &State, path: Option<&PathBuf>) -> Option<String> {
    let json = serde_json::to_string(&state.stats()).ok()?;
    if let Some(path) = path {
        // Write then rename, so a reader never sees half a file.
        let tmp = path.with_extension("tmp");
        if std::fs::write(&tmp, &json).is_ok() {
            let _ = std::fs::rename(&tmp, path);
        }
    }
    Some(json)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let state = Arc::new(State {
        requests: AtomicU64::new(0),
        spans: AtomicU64::new(0),
        root_spans: AtomicU64::new(0),
        error_spans: AtomicU64::new(0),
        bytes: AtomicU64::new(0),
        invalid: AtomicU64::new(0),
        delays: Mutex::new(vec![0; DELAY_BUCKETS]),
    });
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => match tls_acceptor(cert, key) {
            Ok(acceptor) => Some(acceptor),
            Err(error) => {
                eprintln!("tailgate-sink: {error}");
                return std::process::ExitCode::from(1);
            }
        },
        _ => None,
    };
    let listener = match TcpListener::bind(args.listen).await {
        Ok(listener) => listener,
        Err(error) => {
            eprintln!("tailgate-sink: listening on {}: {error}", args.listen);
            return std::process::ExitCode::from(1);
        }
    };
    let mut terminate =
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(signal) => signal,
            Err(error) => {
                eprintln!("tailgate-sink: signal handler: {error}");
                return std::process::ExitCode::from(1);
            }
        };
    let stop_at = tokio::time::Instant::now() + args.max_time;
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                let _ = stream.set_nodelay(true);
                let state = state.clone();
                let tls = tls.clone();
                tokio::spawn(async move {
                    match tls {
                        // A failed handshake only closes that connection.
                        Some(tls) => {
                            if let Ok(stream) = tls.accept(stream).await {
                                serve_connection(stream, state).await;
                            }
                        }
                        None => serve_connection(stream, state).await,
                    }
                });
            }
            _ = tick.tick() => {
                write_stats(&state, args.stats_file.as_ref());
            }
            _ = terminate.recv() => break,
            _ = tokio::signal::ctrl_c() => break,
            _ = tokio::time::sleep_until(stop_at) => break,
        }
    }
    if let Some(json) = write_stats(&state, args.stats_file.as_ref()) {
        #[allow(clippy::print_stdout)]
        {
            println!("{json}");
        }
    }
    std::process::ExitCode::SUCCESS
}
