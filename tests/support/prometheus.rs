//! The Prometheus side of the remote-write tests: a mock receiver built from the official
//! `remote.proto` (snappy block format + prost `WriteRequest`), recording every request with
//! its headers and answering as scripted; and a real `prometheus` server (Debian package)
//! started on a free loopback port, queried over its HTTP API.

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
use tailgate::exporter::remote_write::prompb::WriteRequest;
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
        }
    }
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
    /// The body, snappy-block-decoded and parsed; `None` when it was not valid.
    pub request: Option<WriteRequest>,
    /// What the receiver answered.
    pub status: u16,
}

#[derive(Default)]
struct RwState {
    script: Mutex<VecDeque<Answer>>,
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
    let decoded = snap::raw::Decoder::new()
        .decompress_vec(&body)
        .ok()
        .and_then(|raw| WriteRequest::decode(raw.as_slice()).ok());
    let scripted = state.script.lock().unwrap().pop_front();
    let answer = scripted.unwrap_or_else(|| {
        if decoded.is_some() {
            Answer::ok()
        } else {
            Answer::status(400, "snappy: corrupt input")
        }
    });
    state.received.lock().unwrap().push(Received {
        at,
        headers,
        body,
        request: decoded,
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
    response
        .body(Full::new(Bytes::from_static(answer.body.as_bytes())))
        .unwrap()
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
    /// When the `prometheus` binary is not on PATH (run `scripts/install-prometheus.sh`), or
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
            "the `prometheus` binary is not on PATH: run scripts/install-prometheus.sh \
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
