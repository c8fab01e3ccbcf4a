//! The Prometheus side of the remote-write tests: a mock receiver built from the official
//! protos (snappy block format + prost `WriteRequest`, or `io.prometheus.write.v2.Request`
//! when the `Content-Type` says so), recording every request with its headers and answering
//! as scripted; and a real `prometheus` server (Debian package) started on a free loopback
//! port, queried over its HTTP API.

#![allow(clippy::unwrap_used)] // tests may unwrap: a panic is the failure report

use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use prost::Message;
use tailgate::exporter::remote_write::prompb::{self, WriteRequest};
use tailgate::exporter::remote_write::writev2;
use tokio::net::TcpListener;
use tokio::time::Instant;

// === mock receiver ===

/// One scripted answer.
#[derive(Clone, Debug)]
pub struct Answer {
    /// HTTP status.
    pub status: u16,
    /// Response body (the error message for 4xx/5xx).
    pub body: &'static str,
    /// `Retry-After` header value, if any.
    pub retry_after: Option<&'static str>,
    /// `X-Prometheus-Remote-Write-{Samples,Histograms,Exemplars}-Written` to send in place
    /// of the counts of what was received (2.0 requests only).
    pub written: Option<[u64; 3]>,
}

impl Answer {
    /// 204 No Content, as Prometheus answers a successful write.
    pub fn ok() -> Self {
        Self::status(204, "")
    }

    /// `status` with `body`.
    pub fn status(status: u16, body: &'static str) -> Self {
        Self {
            status,
            body,
            retry_after: None,
            written: None,
        }
    }
}

/// How the receiver treats a remote-write 2.0 request (by its `Content-Type`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum V2Support {
    /// Decodes it and answers with `*-Written` headers counting what it received, as
    /// Prometheus 2.54 and later do.
    #[default]
    Accept,
    /// Answers 415 Unsupported Media Type, as a receiver configured for 1.0 only does.
    Refuse415,
    /// Ignores the headers and decodes the body as 1.0 (an empty request), answering 204
    /// without `*-Written` headers, as Prometheus 2.42 does.
    Legacy,
}

/// One request as received.
#[derive(Clone, Debug)]
pub struct Received {
    /// When the handler started (requests are ordered by this).
    pub at: Instant,
    /// Request headers.
    pub headers: http::HeaderMap,
    /// The raw (compressed) body.
    pub body: Bytes,
    /// The body, snappy-block-decoded and parsed; `None` when it was not valid. A 2.0
    /// request the receiver accepted is given here converted to 1.0 (labels resolved from
    /// the symbols, each 2.0 series one 1.0 series, metadata left out) so that checks on
    /// series work for both protocols.
    pub request: Option<WriteRequest>,
    /// The body as a 2.0 request, when it was sent as one and the receiver decoded it.
    pub request_v2: Option<writev2::Request>,
    /// What the receiver answered.
    pub status: u16,
}

#[derive(Default)]
struct RwState {
    script: Mutex<VecDeque<Answer>>,
    v2: Mutex<V2Support>,
    /// Longest random delay before answering (0 = none).
    max_delay: Mutex<Duration>,
    received: Mutex<Vec<Received>>,
}

/// A remote-write receiver standing in for Prometheus.
pub struct RwReceiver {
    /// Where it listens.
    pub addr: SocketAddr,
    state: Arc<RwState>,
}

impl RwReceiver {
    /// Starts a receiver on a free loopback port; it answers 204 unless scripted.
    pub async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind receiver");
        let addr = listener.local_addr().expect("receiver addr");
        let state = Arc::new(RwState::default());
        let accept_state = state.clone();
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let state = accept_state.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |request| {
                        let state = state.clone();
                        async move { Ok::<_, std::convert::Infallible>(answer(&state, request).await) }
                    });
                    let _ = hyper_util::server::conn::auto::Builder::new(
                        hyper_util::rt::TokioExecutor::new(),
                    )
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .await;
                });
            }
        });
        Self { addr, state }
    }

    /// The remote-write URL.
    pub fn url(&self) -> String {
        format!("http://{}/api/v1/write", self.addr)
    }

    /// Answers the next requests with `answers`, in order, then 204 again.
    pub fn script(&self, answers: impl IntoIterator<Item = Answer>) {
        self.state.script.lock().unwrap().extend(answers);
    }

    /// Sets how 2.0 requests are treated from now on.
    pub fn v2_support(&self, support: V2Support) {
        *self.state.v2.lock().unwrap() = support;
    }

    /// Sleeps a random 0..`max` before answering each request.
    pub fn delay_up_to(&self, max: Duration) {
        *self.state.max_delay.lock().unwrap() = max;
    }

    /// Every request so far, in arrival order.
    pub fn received(&self) -> Vec<Received> {
        let mut all = self.state.received.lock().unwrap().clone();
        all.sort_by_key(|r| r.at);
        all
    }

    /// Every series of every request answered 2xx, in arrival order.
    pub fn accepted_series(&self) -> Vec<tailgate::exporter::remote_write::prompb::TimeSeries> {
        self.received()
            .into_iter()
            .filter(|r| (200..300).contains(&r.status))
            .filter_map(|r| r.request)
            .flat_map(|r| r.timeseries)
            .collect()
    }

    /// Waits until `check` holds for the received requests, at most `limit`.
    pub async fn wait_for(&self, limit: Duration, check: impl Fn(&[Received]) -> bool) -> bool {
        let deadline = Instant::now() + limit;
        loop {
            if check(&self.received()) {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

async fn answer(
    state: &RwState,
    request: http::Request<hyper::body::Incoming>,
) -> http::Response<Full<Bytes>> {
    let at = Instant::now();
    let headers = request.headers().clone();
    let body = request
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let is_v2 = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("proto=io.prometheus.write.v2.Request"));
    let support = *state.v2.lock().unwrap();
    let raw = snap::raw::Decoder::new().decompress_vec(&body).ok();
    let (decoded, decoded_v2) = match (is_v2, support) {
        (true, V2Support::Accept) => {
            let v2 = raw.and_then(|raw| writev2::Request::decode(raw.as_slice()).ok());
            (v2.as_ref().map(v2_as_v1), v2)
        }
        (true, V2Support::Refuse415) => (None, None),
        _ => (
            raw.and_then(|raw| WriteRequest::decode(raw.as_slice()).ok()),
            None,
        ),
    };
    let scripted = state.script.lock().unwrap().pop_front();
    let answer = scripted.unwrap_or_else(|| {
        if is_v2 && support == V2Support::Refuse415 {
            Answer::status(
                415,
                "prometheus.WriteRequest protobuf message is the only one accepted",
            )
        } else if decoded.is_some() {
            Answer::ok()
        } else {
            Answer::status(400, "snappy: corrupt input")
        }
    });
    let written = decoded_v2.as_ref().map(|r| {
        answer.written.unwrap_or_else(|| {
            let count = |f: fn(&writev2::TimeSeries) -> usize| {
                r.timeseries.iter().map(f).sum::<usize>() as u64
            };
            [
                count(|s| s.samples.len()),
                count(|s| s.histograms.len()),
                count(|s| s.exemplars.len()),
            ]
        })
    });
    state.received.lock().unwrap().push(Received {
        at,
        headers,
        body,
        request: decoded,
        request_v2: decoded_v2,
        status: answer.status,
    });
    let max_delay = *state.max_delay.lock().unwrap();
    if !max_delay.is_zero() {
        let delay = max_delay.mul_f64(rand::random::<f64>());
        tokio::time::sleep(delay).await;
    }
    let mut response = http::Response::builder().status(answer.status);
    if let Some(retry_after) = answer.retry_after {
        response = response.header("retry-after", retry_after);
    }
    if let Some([samples, histograms, exemplars]) = written {
        response = response
            .header("x-prometheus-remote-write-samples-written", samples)
            .header("x-prometheus-remote-write-histograms-written", histograms)
            .header("x-prometheus-remote-write-exemplars-written", exemplars);
    }
    response
        .body(Full::new(Bytes::from_static(answer.body.as_bytes())))
        .unwrap()
}

/// The labels of `refs` (name, value pairs of symbol indexes).
pub fn v2_labels(request: &writev2::Request, refs: &[u32]) -> Vec<prompb::Label> {
    assert_eq!(refs.len() % 2, 0, "odd labels_refs");
    refs.chunks(2)
        .map(|pair| prompb::Label {
            name: request.symbols[pair[0] as usize].clone(),
            value: request.symbols[pair[1] as usize].clone(),
        })
        .collect()
}

/// A 2.0 request as 1.0 series. Histograms convert by re-encoding: 2.0 kept the 1.0 field
/// numbers 1–15 and 1.0 skips the new ones.
fn v2_as_v1(request: &writev2::Request) -> WriteRequest {
    WriteRequest {
        timeseries: request
            .timeseries
            .iter()
            .map(|s| prompb::TimeSeries {
                labels: v2_labels(request, &s.labels_refs),
                samples: s
                    .samples
                    .iter()
                    .map(|p| prompb::Sample {
                        value: p.value,
                        timestamp: p.timestamp,
                    })
                    .collect(),
                exemplars: s
                    .exemplars
                    .iter()
                    .map(|e| prompb::Exemplar {
                        labels: v2_labels(request, &e.labels_refs),
                        value: e.value,
                        timestamp: e.timestamp,
                    })
                    .collect(),
                histograms: s
                    .histograms
                    .iter()
                    .map(|h| prompb::Histogram::decode(h.encode_to_vec().as_slice()).unwrap())
                    .collect(),
            })
            .collect(),
        metadata: Vec::new(),
    }
}

// === real Prometheus ===

/// A `prometheus` server on a free loopback port with a temporary data directory; killed
/// on drop.
pub struct Prometheus {
    child: Option<Child>,
    port: u16,
    dir: tempfile::TempDir,
}

/// One series of a PromQL vector result: labels (with `__name__`) and value.
pub type VectorSample = (BTreeMap<String, String>, f64);

impl Prometheus {
    /// Starts Prometheus with the remote-write receiver and native histograms enabled, an
    /// empty scrape config and a fresh TSDB, and waits (at most 20 s) until it is ready.
    ///
    /// # Panics
    ///
    /// When the `prometheus` binary is not on PATH (run `scripts/install-test-servers.sh`), or
    /// it does not become ready.
    pub async fn start() -> Self {
        let found = Command::new("prometheus")
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        assert!(
            found,
            "the `prometheus` binary is not on PATH: run scripts/install-test-servers.sh \
             (installs Debian's prometheus package) before these tests"
        );
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(
            dir.path().join("prometheus.yml"),
            "global:\n  scrape_interval: 15s\nscrape_configs: []\n",
        )
        .expect("write prometheus.yml");
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port();
        let mut prometheus = Self {
            child: None,
            port,
            dir,
        };
        prometheus.restart().await;
        prometheus
    }

    /// The base URL, e.g. `http://127.0.0.1:9090`.
    pub fn base(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The remote-write URL.
    pub fn write_url(&self) -> String {
        format!("{}/api/v1/write", self.base())
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// (Re)starts the server on the same port and data directory and waits until ready.
    pub async fn restart(&mut self) {
        assert!(self.child.is_none(), "already running");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("prometheus.log"))
            .expect("log file");
        let child = Command::new("prometheus")
            .arg("--web.enable-remote-write-receiver")
            .arg("--enable-feature=native-histograms")
            .arg(format!(
                "--config.file={}",
                self.dir.path().join("prometheus.yml").display()
            ))
            .arg(format!("--storage.tsdb.path={}", self.data_dir().display()))
            .arg(format!("--web.listen-address=127.0.0.1:{}", self.port))
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log file"))
            .stderr(log)
            .spawn()
            .expect("spawn prometheus");
        self.child = Some(child);
        let ready = format!("{}/-/ready", self.base());
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                panic!("prometheus exited with {status}; log:\n{}", self.log());
            }
            if get(&ready).await.is_some_and(|(status, _)| status == 200) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "prometheus not ready within 20s; log:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Stops the server (SIGTERM, then SIGKILL after 10 s) and waits for it to exit.
    pub async fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(child.id().to_string())
            .status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while child.try_wait().ok().flatten().is_none() {
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Stops the server like [`stop`](Self::stop), then holds its port until
    /// [`restart_on`](Self::restart_on): nothing else can take the port meanwhile, and every
    /// connection to it is accepted and closed at once, so that a remote-write client sees
    /// the server as down (its requests fail without an answer).
    pub async fn stop_holding_port(&mut self) -> PortHold {
        self.stop().await;
        let address = format!("127.0.0.1:{}", self.port);
        // The old server's connections may linger in TIME_WAIT; std sets SO_REUSEADDR, so
        // the bind succeeds unless another process took the port in the instant between.
        let listener = std::net::TcpListener::bind(&address)
            .unwrap_or_else(|e| panic!("hold port {address}: {e}"));
        listener
            .set_nonblocking(true)
            .expect("non-blocking listener");
        let running = Arc::new(std::sync::atomic::AtomicBool::new(true));
        let thread = {
            let running = running.clone();
            std::thread::spawn(move || {
                // Bounded: until released, and at most 10 minutes.
                let deadline = std::time::Instant::now() + Duration::from_secs(600);
                while running.load(std::sync::atomic::Ordering::Relaxed)
                    && std::time::Instant::now() < deadline
                {
                    match listener.accept() {
                        Ok((stream, _)) => drop(stream),
                        Err(_) => std::thread::sleep(Duration::from_millis(10)),
                    }
                }
            })
        };
        PortHold {
            running,
            thread: Some(thread),
        }
    }

    /// Releases the port held by `hold` and restarts the server on it at once (see
    /// [`restart`](Self::restart)).
    pub async fn restart_on(&mut self, hold: PortHold) {
        drop(hold);
        self.restart().await;
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("prometheus.log")).unwrap_or_default()
    }

    /// Runs an instant PromQL query (at `time`, seconds, or now) and returns the vector
    /// result.
    ///
    /// # Panics
    ///
    /// When the query fails or does not return a vector.
    pub async fn query(&self, promql: &str, time: Option<f64>) -> Vec<VectorSample> {
        let mut url = format!("{}/api/v1/query?query={}", self.base(), encode(promql));
        if let Some(time) = time {
            url.push_str(&format!("&time={time:.3}"));
        }
        let (status, body) = get(&url).await.expect("query prometheus");
        assert_eq!(status, 200, "{promql}: {body}");
        let json: serde_json::Value = serde_json::from_str(&body).expect("query JSON");
        assert_eq!(json["status"], "success", "{promql}: {body}");
        assert_eq!(json["data"]["resultType"], "vector", "{promql}: {body}");
        json["data"]["result"]
            .as_array()
            .expect("result array")
            .iter()
            .map(|item| {
                let labels = item["metric"]
                    .as_object()
                    .expect("metric labels")
                    .iter()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
                    .collect();
                let value = item["value"][1]
                    .as_str()
                    .expect("value string")
                    .parse::<f64>()
                    .expect("numeric value");
                (labels, value)
            })
            .collect()
    }

    /// The single value of `promql` (at `time`), or `None` when the result is empty.
    ///
    /// # Panics
    ///
    /// When the result has more than one series.
    pub async fn value(&self, promql: &str, time: Option<f64>) -> Option<f64> {
        let result = self.query(promql, time).await;
        assert!(result.len() <= 1, "{promql}: {result:?}");
        result.first().map(|(_, v)| *v)
    }
}

/// A stopped server's port, held by the test (see [`Prometheus::stop_holding_port`]);
/// released on drop.
pub struct PortHold {
    running: Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for PortHold {
    fn drop(&mut self) {
        self.running
            .store(false, std::sync::atomic::Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Percent-encodes a query parameter value.
fn encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len() * 3);
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A GET over a fresh connection: (status, body), or `None` when it could not connect.
async fn get(url: &str) -> Option<(u16, String)> {
    let url = url.to_owned();
    tokio::task::spawn_blocking(move || {
        let client = reqwest::blocking::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()
            .ok()?;
        let response = client.get(&url).send().ok()?;
        let status = response.status().as_u16();
        Some((status, response.text().unwrap_or_default()))
    })
    .await
    .ok()
    .flatten()
}
