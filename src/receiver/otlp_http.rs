//! OTLP/HTTP: `POST /v1/traces` and `POST /v1/metrics` with protobuf or JSON bodies,
//! answered like the Collector's receiver (`/v1/metrics` answers 404 `UNIMPLEMENTED` when
//! the receiver feeds no metrics pipeline).
//!
//! - 200 with an empty `ExportTraceServiceResponse` in the request's encoding;
//! - 400 for an undecodable body or an unknown `Content-Encoding`, 405 for a method other
//!   than POST, 413 for a body over `max_request_body_size` (after decompression), 415 for
//!   a content type other than `application/x-protobuf` or `application/json`, each with a
//!   `google.rpc.Status` body carrying the message;
//! - 503 with `Retry-After` when the pipeline is full or shutting down, when the memory
//!   budget has no room for the body, or when `max_concurrent_requests` are in flight;
//! - 401 with `WWW-Authenticate` when the server has an authenticator and the request's
//!   credentials do not satisfy it: checked for every request to an OTLP path except CORS
//!   preflights, before anything else.
//!
//! Admission (see the [module docs](super)) happens before the body is read: the memory
//! reservation is the declared `Content-Length`, else `max_request_body_size`. The body is
//! read into one buffer of that length; decompression grows the reservation as it goes and
//! moves to a blocking thread once a body has produced 256 KiB, and JSON bodies over
//! 256 KiB are transcoded there too, so no large body is decoded on the async workers.
//!
//! A request refused before its body is read (no valid credentials, too many in flight, a
//! content type or
//! `Content-Encoding` not taken, a declared length over the limit, no room in the memory
//! budget; also 404 and 405) has its body read and dropped before it is answered, bounded
//! in bytes and time and without reserving memory, so that clients that write the whole
//! body before reading (Python's `requests`, so the Python SDK) read the answer rather
//! than a broken pipe (see `discard_unread`).

use std::io::Read;
use std::time::Duration;

use bytes::{Buf, Bytes};
use http::header::{self, HeaderValue};
use http::{Method, StatusCode};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use prost::Message;
use tokio::net::TcpListener;
use tokio::sync::watch;

use super::in_flight::InFlightLimit;
use super::tls::ServerTls;
use super::{Authenticator, Intake, MetricsIntake, TracesIntake};
use crate::config::{CorsConfig, HttpServerConfig};
use crate::error::PipelineError;
use crate::limiter::Reservation;
use crate::net::{Acceptor, FullBody, PeerAddr, serve_http_on};
use crate::payload::Arrival;

/// How long open connections may take to finish their requests once `stop` turns true.
const DRAIN_GRACE: Duration = Duration::from_secs(10);

/// Decompression runs on the async worker until a body has produced this many bytes; the
/// rest (a large body, or a small one that inflates a lot) runs on a blocking thread.
/// About half a millisecond of inflating: short enough not to hold up other requests.
const INLINE_INFLATE_BYTES: usize = 256 * 1024;

/// JSON bodies larger than this are transcoded on a blocking thread.
const INLINE_JSON_BYTES: usize = 256 * 1024;

/// What transcoding holds per byte of an OTLP/JSON body, besides the body: the parsed
/// document (a flat list of nodes borrowing from the body) and the protobuf written from
/// it, both alive at once. Reserved for the time of the transcoding. Measured: ~3.5 per
/// byte for the load generator's bodies (the document 2.9 with its spare capacity, the
/// protobuf 0.4). The densest JSON (`[0,0,0,…]`, a node per two bytes) peaks near 27
/// while the parser copies a finished array off its stack, above what this reserves;
/// the RSS guard still catches such a body (BENCHMARKS.md, "OTLP/HTTP JSON: CPU per
/// span"). A bound per node, charged as the parser goes, would close that.
const JSON_TRANSCODE_FACTOR: usize = 20;

/// How much a decompression buffer grows by at least.
const INFLATE_STEP: usize = 64 * 1024;

/// The first buffer for a body that declares no length.
const UNDECLARED_BODY_START: usize = 64 * 1024;

/// How long the body of an HTTP/1 request refused before reading is read and dropped
/// before the answer; see [`discard_unread`]. Long enough for a body of [`DISCARD_BYTES`]
/// over a slow link, short enough that a client that stalls does not keep its connection
/// long.
const DISCARD_TIME: Duration = Duration::from_secs(10);

/// How much of the body of an HTTP/1 request refused before reading is read and dropped
/// at least (`max_request_body_size` when that is more), so that a body declared over the
/// limit is still read to its end and its sender gets the 413.
const DISCARD_BYTES: usize = 64 << 20;

/// The `Content-Encoding`s [`Inflater::new`] decodes (lowercase); any other is refused
/// from the headers, before the body is read.
const SUPPORTED_ENCODINGS: &[&str] = &[
    "",
    "identity",
    "gzip",
    "x-gzip",
    "deflate",
    "zlib",
    "zstd",
    "x-snappy-framed",
    "snappy",
    "lz4",
];

/// The body encoding of a request, which is also the encoding of its answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Encoding {
    Protobuf,
    Json,
}

impl Encoding {
    fn content_type(self) -> &'static str {
        match self {
            Self::Protobuf => "application/x-protobuf",
            Self::Json => "application/json",
        }
    }

    /// Parses a `Content-Type`, ignoring parameters such as `charset`.
    fn from_content_type(value: &str) -> Option<Self> {
        let media_type = value.split(';').next().unwrap_or("").trim();
        if media_type.eq_ignore_ascii_case("application/x-protobuf") {
            Some(Self::Protobuf)
        } else if media_type.eq_ignore_ascii_case("application/json") {
            Some(Self::Json)
        } else {
            None
        }
    }
}

/// Serves OTLP/HTTP on `listener` until `stop` turns true, then lets open requests finish.
/// With `tls` (built from `config.tls`), every connection is a TLS connection offering `h2`
/// and `http/1.1` by ALPN; without, plaintext HTTP/1.1 and h2c.
/// With `auth`, every request to an OTLP path (but CORS preflights) must pass it first.
pub async fn serve(
    listener: TcpListener,
    config: HttpServerConfig,
    traces: TracesIntake,
    metrics: MetricsIntake,
    auth: Option<Authenticator>,
    stop: watch::Receiver<bool>,
    tls: Option<ServerTls>,
) {
    let in_flight = InFlightLimit::new(
        config.max_concurrent_requests,
        traces.in_flight_gauge().clone(),
    );
    let receiver = std::sync::Arc::new(HttpReceiver {
        config,
        traces,
        metrics,
        in_flight,
        auth,
    });
    let handler = move |request: http::Request<Incoming>| {
        let receiver = receiver.clone();
        async move { receiver.handle(request).await }
    };
    let acceptor = Acceptor::new(listener);
    match tls {
        Some(tls) => serve_http_on(tls.incoming(acceptor), handler, stop, DRAIN_GRACE).await,
        None => serve_http_on(acceptor, handler, stop, DRAIN_GRACE).await,
    }
}

struct HttpReceiver {
    config: HttpServerConfig,
    traces: TracesIntake,
    metrics: MetricsIntake,
    in_flight: InFlightLimit,
    auth: Option<Authenticator>,
}

impl HttpReceiver {
    async fn handle(&self, request: http::Request<Incoming>) -> http::Response<FullBody> {
        let origin = request.headers().get(header::ORIGIN).cloned();
        let mut response = self.route(request).await;
        if let (Some(cors), Some(origin)) = (&self.config.cors, origin)
            && origin_allowed(cors, &origin)
        {
            let headers = response.headers_mut();
            headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
            headers.insert(header::VARY, HeaderValue::from_static("Origin"));
        }
        response
    }

    async fn route(&self, request: http::Request<Incoming>) -> http::Response<FullBody> {
        let limit = self.config.max_request_body_size;
        let path = request.uri().path();
        let signal = if path == self.config.traces_url_path {
            None
        } else if path == self.config.metrics_url_path {
            Some("metrics")
        } else if path == self.config.logs_url_path {
            Some("logs")
        } else {
            discard_unread(request, limit).await;
            return text(StatusCode::NOT_FOUND, "404 page not found\n");
        };
        if request.method() == Method::OPTIONS {
            let response = self.preflight(&request);
            discard_unread(request, limit).await;
            return response;
        }
        if let Some(auth) = &self.auth {
            let peer = request.extensions().get::<PeerAddr>().map(|peer| peer.0);
            if let Err(error) = auth.authenticate(request.headers(), peer).await {
                if signal == Some("metrics") && self.metrics.has_pipeline() {
                    self.metrics.refuse(&error);
                } else {
                    self.traces.refuse(&error);
                }
                let encoding = request
                    .headers()
                    .get(header::CONTENT_TYPE)
                    .and_then(|v| v.to_str().ok())
                    .and_then(Encoding::from_content_type)
                    .unwrap_or(Encoding::Json);
                discard_unread(request, limit).await;
                let mut response = error_response(&error, encoding);
                if matches!(error, PipelineError::Unauthenticated) {
                    response
                        .headers_mut()
                        .insert(header::WWW_AUTHENTICATE, auth.challenge());
                }
                return response;
            }
        }
        if request.method() != Method::POST {
            discard_unread(request, limit).await;
            return text(
                StatusCode::METHOD_NOT_ALLOWED,
                "405 method not allowed, supported: [POST]\n",
            );
        }
        let content_type = request
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        let metrics = signal == Some("metrics") && self.metrics.has_pipeline();
        let Some(encoding) = Encoding::from_content_type(&content_type) else {
            let error = PipelineError::UnsupportedMediaType(content_type);
            if metrics {
                self.metrics.refuse(&error);
            } else {
                self.traces.refuse(&error);
            }
            discard_unread(request, limit).await;
            return error_response(&error, Encoding::Json);
        };
        let exported = if metrics {
            self.export(&self.metrics, request, encoding).await
        } else if let Some(signal) = signal {
            discard_unread(request, limit).await;
            return error_response(&PipelineError::NoPipeline(signal), encoding);
        } else {
            self.export(&self.traces, request, encoding).await
        };
        match exported {
            Ok(()) => {
                let body = match encoding {
                    Encoding::Protobuf => Bytes::new(),
                    Encoding::Json => Bytes::from_static(b"{}"),
                };
                respond(StatusCode::OK, encoding.content_type(), body)
            }
            Err(error) => error_response(&error, encoding),
        }
    }

    /// Admits, reads, decodes and ingests one export request; every refusal is counted.
    ///
    /// What can be refused from the headers (requests in flight, `Content-Encoding`,
    /// declared length, memory budget) is refused before the body is read, the body being
    /// read and dropped before the answer (see [`discard_unread`]): no memory is reserved
    /// for it.
    async fn export<I: Intake>(
        &self,
        intake: &I,
        request: http::Request<Incoming>,
        encoding: Encoding,
    ) -> Result<(), PipelineError> {
        let limit = self.config.max_request_body_size;
        let permit = match self.in_flight.try_acquire() {
            Ok(permit) => permit,
            Err(error) => {
                intake.refuse_too_many();
                discard_unread(request, limit).await;
                return Err(error);
            }
        };
        let content_encoding = request
            .headers()
            .get(header::CONTENT_ENCODING)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        let declared = declared_length(&request);
        let refused = if !SUPPORTED_ENCODINGS.contains(&content_encoding.as_str()) {
            Some(PipelineError::UnsupportedEncoding(content_encoding.clone()))
        } else if declared.is_some_and(|declared| declared > limit) {
            Some(PipelineError::TooLarge { limit })
        } else {
            None
        };
        if let Some(error) = refused {
            intake.refuse(&error);
            drop(permit);
            discard_unread(request, limit).await;
            return Err(error);
        }
        // Admission before the body is read: for what it may come to.
        let reservation = match intake.reserve(declared.unwrap_or(0), declared.unwrap_or(limit)) {
            Ok(reservation) => reservation,
            Err(error) => {
                drop(permit);
                discard_unread(request, limit).await;
                return Err(error);
            }
        };
        let decoded = async {
            let (body, reservation) =
                read_body(request.into_body(), declared, limit, reservation).await?;
            let (body, reservation) = inflate(&content_encoding, body, limit, reservation).await?;
            match encoding {
                Encoding::Protobuf => Ok((body, None, reservation)),
                Encoding::Json => transcode::<I>(body, reservation).await,
            }
        };
        let (protobuf, vouched_items, reservation) = match decoded.await {
            Ok(decoded) => decoded,
            Err(error) => {
                intake.refuse(&error);
                return Err(error);
            }
        };
        let ingested = intake
            .ingest(protobuf, vouched_items, reservation, Arrival::Sent)
            .await
            .map(|_items| ());
        drop(permit);
        ingested
    }

    /// Answers a CORS preflight: allowed origins get the allowed methods and headers.
    fn preflight(&self, request: &http::Request<Incoming>) -> http::Response<FullBody> {
        let Some(cors) = &self.config.cors else {
            return text(
                StatusCode::METHOD_NOT_ALLOWED,
                "405 method not allowed, supported: [POST]\n",
            );
        };
        let mut response = respond(StatusCode::NO_CONTENT, "text/plain", Bytes::new());
        let Some(origin) = request.headers().get(header::ORIGIN) else {
            return response;
        };
        if !origin_allowed(cors, origin) {
            return response;
        }
        let headers = response.headers_mut();
        headers.insert(
            header::ACCESS_CONTROL_ALLOW_METHODS,
            HeaderValue::from_static("POST"),
        );
        if let Some(requested) = request
            .headers()
            .get(header::ACCESS_CONTROL_REQUEST_HEADERS)
        {
            headers.insert(header::ACCESS_CONTROL_ALLOW_HEADERS, requested.clone());
        }
        if let Some(max_age) = cors.max_age {
            headers.insert(header::ACCESS_CONTROL_MAX_AGE, HeaderValue::from(max_age));
        }
        response
    }
}

/// The body length the client declared (chunked bodies declare none).
fn declared_length(request: &http::Request<Incoming>) -> Option<usize> {
    request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<usize>().ok())
}

/// Reads the body of a request refused before its body was read, and drops it as it comes,
/// before the refusal is answered: at most `max(limit, DISCARD_BYTES)` bytes and for at most
/// [`DISCARD_TIME`].
///
/// hyper closes an HTTP/1 connection whose request body is left unread, and a client still
/// sending its body then gets a broken pipe or a reset connection instead of the answer
/// (the unread bytes make the kernel reset it, which also discards the answer the client
/// has not read yet). Clients that write the whole body before reading the answer (Python's
/// `http.client` and `requests`, so the Python SDK) never see the refusal then. Once the
/// body has been read to its end the connection is kept, as after an accepted request.
/// Reading costs no memory budget: each chunk is dropped as it comes, only hyper's read
/// buffer is held.
///
/// The answer waits for the body rather than going out first while a task drains it:
/// answered first, hyper's client left most of its connections open after it was dropped
/// (38 of 64 in `tests/admission.rs`, idle on both sides), and the server's read buffers
/// of those connections kept the memory limiter above its recovery point.
///
/// Not read: HTTP/2 bodies (the stream alone is reset), bodies after `Expect:
/// 100-continue` (the client has not sent the body and waits for the answer: reading
/// would send `100 Continue` and invite it; hyper closes the connection after the answer
/// instead), and bodies declared longer than the bound (they could not be read to their
/// end anyway; the connection is closed at once).
async fn discard_unread(request: http::Request<Incoming>, limit: usize) {
    let expects_continue = request
        .headers()
        .get(header::EXPECT)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
    let bound = limit.max(DISCARD_BYTES);
    if request.version() >= http::Version::HTTP_2
        || expects_continue
        || declared_length(&request).is_some_and(|declared| declared > bound)
    {
        return;
    }
    let mut body = request.into_body();
    let mut seen = 0usize;
    let _ = tokio::time::timeout(DISCARD_TIME, async {
        while let Some(Ok(frame)) = body.frame().await {
            seen = seen.saturating_add(frame.data_ref().map_or(0, Bytes::len));
            if seen > bound {
                break;
            }
        }
    })
    .await;
}

/// Reads the body, at most `limit` bytes, into one buffer: of the declared length when
/// there is one, else grown as the body arrives. The reservation is kept at or above the
/// buffer's size, and ends at the body's length.
///
/// # Errors
///
/// [`PipelineError::TooLarge`] past `limit`, [`PipelineError::Malformed`] when the body
/// cannot be read (the client went away), [`PipelineError::Overloaded`] when the
/// reservation cannot grow with a body longer than declared.
async fn read_body(
    mut body: Incoming,
    declared: Option<usize>,
    limit: usize,
    mut reservation: Reservation,
) -> Result<(Bytes, Reservation), PipelineError> {
    let mut buf: Vec<u8> = Vec::with_capacity(declared.unwrap_or(UNDECLARED_BODY_START).min(limit));
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|error| {
            PipelineError::Malformed(format!("reading the request body: {error}"))
        })?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        let len = buf.len() + data.len();
        if len > limit {
            return Err(PipelineError::TooLarge { limit });
        }
        if len > buf.capacity() {
            let capacity = len.max(buf.capacity() * 2).min(limit);
            if capacity > reservation.bytes() {
                reservation.resize(capacity)?;
            }
            buf.reserve_exact(capacity - buf.len());
        }
        buf.extend_from_slice(&data);
    }
    buf.shrink_to_fit();
    reservation.resize(buf.len())?;
    Ok((Bytes::from(buf), reservation))
}

/// Undoes `Content-Encoding`, refusing output larger than `limit` bytes: on the async
/// worker for the first [`INLINE_INFLATE_BYTES`] of output, then on a blocking thread.
///
/// # Errors
///
/// As [`Inflater::new`] and [`Inflater::run`].
async fn inflate(
    content_encoding: &str,
    body: Bytes,
    limit: usize,
    mut reservation: Reservation,
) -> Result<(Bytes, Reservation), PipelineError> {
    let Some(mut inflater) = Inflater::new(content_encoding, &body, limit)? else {
        return Ok((body, reservation));
    };
    drop(body);
    if inflater.run(&mut reservation, INLINE_INFLATE_BYTES)? {
        return inflater.finish(reservation);
    }
    tokio::task::spawn_blocking(move || {
        inflater.run(&mut reservation, usize::MAX)?;
        inflater.finish(reservation)
    })
    .await
    .map_err(blocking_failed)?
}

/// Fuzzing entry point: undoes `content_encoding` on `body` as [`inflate`] does, the
/// first `inline_budget` bytes of output in one step and the rest in a second, without a
/// memory limit and on the calling thread. Returns the body itself when it is not encoded.
///
/// # Errors
///
/// As [`inflate`]: unsupported encoding, a body that does not decompress, or output larger
/// than `limit` bytes.
#[doc(hidden)]
pub fn decompress_body(
    content_encoding: &str,
    body: Bytes,
    limit: usize,
    inline_budget: usize,
) -> Result<Bytes, PipelineError> {
    let mut reservation = Reservation::unlimited();
    let Some(mut inflater) = Inflater::new(content_encoding, &body, limit)? else {
        return Ok(body);
    };
    drop(body);
    if !inflater.run(&mut reservation, inline_budget)? {
        inflater.run(&mut reservation, usize::MAX)?;
    }
    inflater.finish(reservation).map(|(out, _)| out)
}

/// Transcodes an OTLP/JSON body to protobuf, on a blocking thread when it is larger than
/// [`INLINE_JSON_BYTES`], with the reservation grown for what transcoding holds and then
/// shrunk to the protobuf's size. Returns the protobuf, the item count when the transcoder
/// vouches for its output ([`crate::payload::Transcoded::vouched_items`]), and the
/// reservation.
///
/// # Errors
///
/// [`PipelineError::Malformed`] for invalid OTLP/JSON, [`PipelineError::Overloaded`]
/// when the memory budget has no room for the transcoding.
async fn transcode<I: Intake>(
    json: Bytes,
    mut reservation: Reservation,
) -> Result<(Bytes, Option<usize>, Reservation), PipelineError> {
    reservation.resize(json.len().saturating_mul(1 + JSON_TRANSCODE_FACTOR))?;
    let large = json.len() > INLINE_JSON_BYTES;
    let run = move || {
        let transcoded = I::json_to_protobuf(&json)?;
        drop(json);
        reservation.resize(transcoded.request.len())?;
        Ok((
            Bytes::from(transcoded.request),
            transcoded.vouched_items,
            reservation,
        ))
    };
    if large {
        tokio::task::spawn_blocking(run)
            .await
            .map_err(blocking_failed)?
    } else {
        run()
    }
}

/// A blocking decode task that did not finish: the runtime is shutting down, or it
/// panicked (a bug in a decoder, logged).
fn blocking_failed(error: tokio::task::JoinError) -> PipelineError {
    if error.is_cancelled() {
        return PipelineError::ShuttingDown;
    }
    tracing::error!(event = "receiver.decode_failed", error = %error);
    PipelineError::Malformed("the request body could not be decoded".to_owned())
}

/// True when `origin` matches one of `cors.allowed_origins` (`*` wildcards allowed).
fn origin_allowed(cors: &CorsConfig, origin: &HeaderValue) -> bool {
    let Ok(origin) = origin.to_str() else {
        return false;
    };
    cors.allowed_origins
        .iter()
        .any(|pattern| wildcard_match(pattern, origin))
}

/// Matches `text` against `pattern`, where each `*` stands for any run of characters.
fn wildcard_match(pattern: &str, text: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or("");
    let Some(mut rest) = text.strip_prefix(first) else {
        return false;
    };
    let mut parts: Vec<&str> = parts.collect();
    let Some(last) = parts.pop() else {
        return rest.is_empty();
    };
    for part in parts {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.ends_with(last)
}

/// A body being decompressed, in steps: the first on the async worker, the rest (if any)
/// on a blocking thread.
struct Inflater {
    source: Source,
    /// The compressed body, held (inside the source) until the end.
    compressed_len: usize,
    out: Vec<u8>,
    limit: usize,
    encoding: String,
}

/// Where decompressed bytes come from.
enum Source {
    /// A streaming decoder, read in steps.
    Stream(Box<dyn Read + Send>),
    /// A snappy block (the format has no streaming decoder), decoded in one go once its
    /// declared length, checked against the limit, is reserved.
    SnappyBlock { body: Bytes, len: usize },
}

/// The stream identifier that opens every snappy framed stream.
const SNAPPY_FRAMED_MAGIC: &[u8] = b"\xff\x06\x00\x00sNaPpY";

impl Inflater {
    /// A decompression of `body` per `content_encoding` (the encodings the Collector's
    /// HTTP server takes: gzip, zstd, deflate/zlib, snappy in block or framed format
    /// told apart by the framed format's stream identifier, x-snappy-framed, lz4 frames);
    /// `None` when it is not encoded.
    ///
    /// # Errors
    ///
    /// [`PipelineError::UnsupportedEncoding`] for an encoding not decoded here,
    /// [`PipelineError::Malformed`] when a zstd decoder cannot be made or a snappy block's
    /// header is invalid, [`PipelineError::TooLarge`] when a snappy block declares more
    /// than `limit` bytes.
    fn new(
        content_encoding: &str,
        body: &Bytes,
        limit: usize,
    ) -> Result<Option<Self>, PipelineError> {
        let reader = body.clone().reader();
        let stream = |decoder: Box<dyn Read + Send>| Source::Stream(decoder);
        let source = match content_encoding {
            "" | "identity" => return Ok(None),
            "gzip" | "x-gzip" => stream(Box::new(flate2::read::GzDecoder::new(reader))),
            "deflate" | "zlib" => stream(Box::new(flate2::read::ZlibDecoder::new(reader))),
            "zstd" => match zstd::stream::read::Decoder::new(reader) {
                Ok(decoder) => stream(Box::new(decoder)),
                Err(error) => return Err(PipelineError::Malformed(format!("zstd body: {error}"))),
            },
            "x-snappy-framed" => stream(Box::new(snap::read::FrameDecoder::new(reader))),
            "snappy" if body.starts_with(SNAPPY_FRAMED_MAGIC) => {
                stream(Box::new(snap::read::FrameDecoder::new(reader)))
            }
            "snappy" => {
                let len = snap::raw::decompress_len(body).map_err(|error| {
                    PipelineError::Malformed(format!("snappy body does not decompress: {error}"))
                })?;
                if len > limit {
                    return Err(PipelineError::TooLarge { limit });
                }
                Source::SnappyBlock {
                    body: body.clone(),
                    len,
                }
            }
            "lz4" => stream(Box::new(lz4_flex::frame::FrameDecoder::new(reader))),
            other => return Err(PipelineError::UnsupportedEncoding(other.to_owned())),
        };
        Ok(Some(Self {
            source,
            compressed_len: body.len(),
            out: Vec::new(),
            limit,
            encoding: content_encoding.to_owned(),
        }))
    }

    /// Decompresses until the end of the body (true) or until about `budget` more bytes
    /// came out (false: call again). The output buffer grows in steps, each reserved
    /// first, so the reservation always covers the compressed body and the buffer.
    ///
    /// # Errors
    ///
    /// [`PipelineError::TooLarge`] past the limit, [`PipelineError::Malformed`] when the
    /// body does not decompress, [`PipelineError::Overloaded`] when the memory budget has
    /// no room for the output.
    fn run(&mut self, reservation: &mut Reservation, budget: usize) -> Result<bool, PipelineError> {
        let decoder = match &mut self.source {
            Source::Stream(decoder) => decoder,
            Source::SnappyBlock { len, .. } if *len > budget => return Ok(false),
            Source::SnappyBlock { body, len } => {
                let held = self.compressed_len + *len;
                if held > reservation.bytes() {
                    reservation.resize(held)?;
                }
                self.out = vec![0; *len];
                let written = snap::raw::Decoder::new()
                    .decompress(body, &mut self.out)
                    .map_err(|error| {
                        PipelineError::Malformed(format!(
                            "snappy body does not decompress: {error}"
                        ))
                    })?;
                self.out.truncate(written);
                return Ok(true);
            }
        };
        let mut produced = 0usize;
        while produced < budget {
            if self.out.len() == self.out.capacity() {
                // One byte past the limit tells a body over it from one exactly at it.
                let capacity = (self.out.capacity() * 2)
                    .max(INFLATE_STEP)
                    .min(self.limit + 1);
                if capacity == self.out.capacity() {
                    return Err(PipelineError::TooLarge { limit: self.limit });
                }
                let held = self.compressed_len + capacity;
                if held > reservation.bytes() {
                    reservation.resize(held)?;
                }
                self.out.reserve_exact(capacity - self.out.len());
            }
            let room = (self.out.capacity() - self.out.len()).min(budget - produced);
            // `take` keeps `read_to_end` within the capacity just reserved.
            let read = (&mut *decoder)
                .take(room as u64)
                .read_to_end(&mut self.out)
                .map_err(|error| {
                    PipelineError::Malformed(format!(
                        "{} body does not decompress: {error}",
                        self.encoding
                    ))
                })?;
            if self.out.len() > self.limit {
                return Err(PipelineError::TooLarge { limit: self.limit });
            }
            if read < room {
                return Ok(true);
            }
            produced += read;
        }
        Ok(false)
    }

    /// The decompressed body, with the reservation shrunk to it (the compressed body is
    /// released here).
    ///
    /// # Errors
    ///
    /// Never in practice: the reservation only shrinks.
    fn finish(self, mut reservation: Reservation) -> Result<(Bytes, Reservation), PipelineError> {
        let Self {
            source, mut out, ..
        } = self;
        drop(source);
        out.shrink_to_fit();
        reservation.resize(out.len())?;
        Ok((Bytes::from(out), reservation))
    }
}

fn error_response(error: &PipelineError, encoding: Encoding) -> http::Response<FullBody> {
    let answer = error.http_answer();
    let message = error.to_string();
    let body = match encoding {
        Encoding::Protobuf => Bytes::from(
            tonic_types::Status {
                code: answer.grpc_code,
                message,
                details: Vec::new(),
            }
            .encode_to_vec(),
        ),
        Encoding::Json => Bytes::from(crate::otlp::status_json(answer.grpc_code, &message)),
    };
    let mut response = respond(answer.status, encoding.content_type(), body);
    if let Some(seconds) = answer.retry_after_secs {
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
    }
    response
}

fn text(status: StatusCode, message: &'static str) -> http::Response<FullBody> {
    respond(
        status,
        "text/plain; charset=utf-8",
        Bytes::from_static(message.as_bytes()),
    )
}

fn respond(
    status: StatusCode,
    content_type: &'static str,
    body: Bytes,
) -> http::Response<FullBody> {
    let mut response = http::Response::new(FullBody::new(body));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Scenario: CORS origin patterns with and without wildcards.
    /// Guarantees: `*` matches any run of characters, and nothing else is loose.
    #[test]
    fn wildcard_origins() {
        assert!(wildcard_match("*", "https://a.example.com"));
        assert!(wildcard_match(
            "https://*.example.com",
            "https://a.example.com"
        ));
        assert!(!wildcard_match(
            "https://*.example.com",
            "https://a.example.org"
        ));
        assert!(wildcard_match(
            "https://app.example.com",
            "https://app.example.com"
        ));
        assert!(!wildcard_match(
            "https://app.example.com",
            "https://app.example.com.evil"
        ));
    }

    /// Scenario: every name in `SUPPORTED_ENCODINGS`, and names outside it, given to
    /// `Inflater::new`.
    /// Guarantees: the list checked from the headers is what the inflater decodes: no
    /// listed name is refused as unsupported, and unlisted ones are.
    #[test]
    fn encodings_checked_from_headers_are_those_decoded() {
        let body = Bytes::from(gzip(b"otlp"));
        for name in SUPPORTED_ENCODINGS {
            assert!(
                !matches!(
                    Inflater::new(name, &body, 100),
                    Err(PipelineError::UnsupportedEncoding(_))
                ),
                "{name}"
            );
        }
        for name in ["br", "compress", "gzip, br"] {
            assert!(
                matches!(
                    Inflater::new(name, &body, 100),
                    Err(PipelineError::UnsupportedEncoding(_))
                ),
                "{name}"
            );
        }
    }

    /// Decompresses in one go, without a memory limit.
    fn decompress(encoding: &str, body: Bytes, limit: usize) -> Result<Bytes, PipelineError> {
        let mut reservation = Reservation::unlimited();
        let Some(mut inflater) = Inflater::new(encoding, &body, limit)? else {
            return Ok(body);
        };
        assert!(inflater.run(&mut reservation, usize::MAX)?);
        inflater.finish(reservation).map(|(out, _)| out)
    }

    fn gzip(data: &[u8]) -> Vec<u8> {
        use std::io::Write;
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(data).expect("in memory");
        gz.finish().expect("in memory")
    }

    fn limiter(soft: u64) -> std::sync::Arc<crate::limiter::MemoryLimiter> {
        crate::limiter::MemoryLimiter::with_limits(
            crate::limiter::Limits {
                hard: soft * 2,
                soft,
            },
            Duration::from_secs(1),
            &prometheus::Registry::new(),
        )
        .expect("fresh registry")
    }

    /// Scenario: a 3 MiB body gzipped (far past the inline share, so most of it inflates
    /// on a blocking thread), under a memory limit with room for it.
    /// Guarantees: it decodes to the original; while inflating, the reservation covered
    /// the compressed body and the output (the budget's peak is at least both); at the end
    /// it holds exactly the output.
    #[tokio::test]
    async fn inflates_large_bodies_under_a_growing_reservation() {
        let original: Vec<u8> = (0..3u32 << 20).map(|i| (i % 251) as u8).collect();
        let compressed = Bytes::from(gzip(&original));
        let limiter = limiter(64 << 20);
        let reservation = limiter.reserve(compressed.len()).expect("room");
        let (out, reservation) = inflate("gzip", compressed.clone(), 20 << 20, reservation)
            .await
            .expect("inflates");
        assert_eq!(&out[..], &original[..]);
        assert_eq!(reservation.bytes(), original.len());
        assert_eq!(limiter.budget().used(), original.len());
        assert!(limiter.budget().peak() >= compressed.len() + original.len());
        drop(reservation);
        assert_eq!(limiter.budget().used(), 0);
    }

    /// Scenario: a small gzip body that inflates to 2 MiB, with a soft limit of 1 MiB;
    /// then one that inflates to 512 KiB while 700 KiB of the budget are held elsewhere.
    /// Guarantees: decompression stops when the reservation cannot grow: for good (not
    /// retryable) when the output alone passes the soft limit, retryably when it would fit
    /// an emptier budget; everything reserved is released.
    #[tokio::test]
    async fn inflating_past_the_budget_is_refused() {
        let compressed = Bytes::from(gzip(&vec![7u8; 2 << 20]));
        let limiter = limiter(1 << 20);
        let reservation = limiter.reserve(compressed.len()).expect("room");
        let refused = inflate("gzip", compressed, 20 << 20, reservation)
            .await
            .expect_err("the output can never fit");
        assert!(!refused.is_retryable(), "{refused}");
        assert_eq!(limiter.budget().used(), 0);
        assert!(limiter.budget().peak() <= 1 << 20);

        let compressed = Bytes::from(gzip(&vec![7u8; 512 << 10]));
        limiter.budget().charge(700 << 10);
        let reservation = limiter.reserve(compressed.len()).expect("room");
        let refused = inflate("gzip", compressed, 20 << 20, reservation)
            .await
            .expect_err("no room beside what is held");
        assert!(refused.is_retryable(), "{refused}");
        limiter.budget().release(700 << 10);
        assert_eq!(limiter.budget().used(), 0);
    }

    /// Scenario: bodies in every Content-Encoding the Collector's HTTP server takes, each
    /// made by its reference crate (flate2, zstd, snap in block and framed format, lz4_flex
    /// frames), decoded with room and with a limit below their size; a body larger than
    /// the inline step (decoded on a blocking thread); an unknown encoding; garbage.
    /// Guarantees: each decodes to the original under each name it is sent as (snappy
    /// block or framed, told apart); output over the limit is refused as too large for
    /// every encoding; an unknown encoding is refused by name; garbage is malformed.
    #[test]
    fn decompresses_within_limit() {
        use std::io::Write;
        let encodings = |original: &[u8]| -> Vec<(&'static str, Vec<u8>)> {
            let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            gz.write_all(original).expect("in memory");
            let mut zl = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::fast());
            zl.write_all(original).expect("in memory");
            let mut framed = snap::write::FrameEncoder::new(Vec::new());
            framed.write_all(original).expect("in memory");
            let framed = framed.into_inner().expect("in memory");
            let mut lz4 = lz4_flex::frame::FrameEncoder::new(Vec::new());
            lz4.write_all(original).expect("in memory");
            vec![
                ("gzip", gz.finish().expect("in memory")),
                ("zstd", zstd::encode_all(original, 1).expect("in memory")),
                ("deflate", zl.finish().expect("in memory")),
                (
                    "snappy",
                    snap::raw::Encoder::new()
                        .compress_vec(original)
                        .expect("in memory"),
                ),
                ("snappy", framed.clone()),
                ("x-snappy-framed", framed),
                ("lz4", lz4.finish().expect("in memory")),
            ]
        };
        let small = b"hello otlp".repeat(100);
        let large: Vec<u8> = (0..2_000_000u32)
            .flat_map(|i| (i % 251).to_le_bytes())
            .collect();
        for original in [&small, &large] {
            for (name, body) in encodings(original) {
                let out = decompress(name, Bytes::from(body.clone()), 16 << 20).expect(name);
                assert_eq!(out.len(), original.len(), "{name}");
                assert!(out[..] == original[..], "{name}");
                let limit = original.len() - 1;
                assert!(
                    matches!(
                        decompress(name, Bytes::from(body), limit),
                        Err(PipelineError::TooLarge { .. })
                    ),
                    "{name} over the limit"
                );
            }
        }
        assert!(matches!(
            decompress("br", Bytes::new(), 100),
            Err(PipelineError::UnsupportedEncoding(_))
        ));
        assert!(matches!(
            decompress("gzip", Bytes::from_static(b"not gzip"), 100),
            Err(PipelineError::Malformed(_))
        ));
    }
}
