//! Early refusals that body-first clients can read: an OTLP/HTTP request refused before its
//! body is read (memory budget full, too many requests in flight, a declared length over
//! the limit, a content type or encoding refused from the headers) is answered with a
//! complete response that a client writing its whole body before reading gets, instead of
//! a broken pipe or a reset connection. Shown with the OpenTelemetry Python SDK's HTTP
//! exporter (which sends through `requests`, body first) from the venv that
//! `scripts/install-test-python.sh` creates, and with a raw TCP client.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use opentelemetry_proto::tonic::common::v1::any_value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::{self, OtlpSink, SinkBehavior};

/// Spans the Python SDK sends, in export requests of 50 spans (about 60 KiB each).
const PYTHON_SPANS: usize = 400;

/// The largest body the budget-filling connections declare: the HTTP receiver's limit.
const HOLD_MAX: usize = 64 << 20;

/// The smallest: the room left in the budget once filled is below this, far below one of
/// the Python SDK's export requests and the raw client's body.
const HOLD_MIN: usize = 16 << 10;

/// The body the raw client writes in full before it reads.
const LARGE_BODY: usize = 8 << 20;

/// The venv with the OpenTelemetry Python SDK: `TAILGATE_TEST_VENV`, else
/// `target/test-venv` in the crate. Panics with the way to make it when it is missing.
fn venv_python() -> PathBuf {
    let venv = std::env::var_os("TAILGATE_TEST_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/test-venv"));
    let python = venv.join("bin/python3");
    assert!(
        python.exists(),
        "no Python venv with the OpenTelemetry SDK at {}: run scripts/install-test-python.sh \
         (or set TAILGATE_TEST_VENV to a venv with opentelemetry-sdk and \
         opentelemetry-exporter-otlp-proto-http)",
        venv.display()
    );
    python
}

/// A gateway whose HTTP receiver admits bodies up to 64 MiB through a memory limiter with
/// a 1 GiB limit (soft limit 819 MiB, far above the test process's RSS). The limiter reads
/// the RSS once at start only (`check_interval: 1h`), so the room in the budget moves with
/// reservations alone and the test can fill it exactly.
fn limited_config(sink: SocketAddr) -> String {
    support::gateway_config(sink, "")
        .replace(
            "      http:\n        endpoint: 127.0.0.1:0\n",
            &format!(
                "      http:\n        endpoint: 127.0.0.1:0\n        max_request_body_size: {HOLD_MAX}\n"
            ),
        )
        .replace(
            "processors:\n  batch:",
            "processors:\n  memory_limiter: {check_interval: 1h, limit_mib: 1024}\n  batch:",
        )
        .replace("processors: [batch]", "processors: [memory_limiter, batch]")
}

/// Opens a request declaring `length` bytes with `Expect: 100-continue` and sends no body.
/// An admitted request holds its reservation (and its in-flight slot) while the returned
/// connection stays open; `None` when the gateway refused it.
async fn hold(addr: SocketAddr, length: usize) -> Option<TcpStream> {
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    let head = format!(
        "POST /v1/traces HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/x-protobuf\r\n\
         content-length: {length}\r\nexpect: 100-continue\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).await.expect("write head");
    let mut answer = Vec::new();
    let mut buf = [0u8; 1024];
    while !answer.windows(4).any(|w| w == b"\r\n\r\n") {
        let read = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut buf))
            .await
            .expect("an answer to the head in time")
            .expect("read");
        assert!(read > 0, "the gateway answered the head");
        answer.extend_from_slice(&buf[..read]);
    }
    let answer = String::from_utf8_lossy(&answer);
    if answer.starts_with("HTTP/1.1 100") {
        Some(stream)
    } else {
        assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
        None
    }
}

/// Fills the memory budget with held requests, from [`HOLD_MAX`] bytes down to
/// [`HOLD_MIN`], until less than `HOLD_MIN` is left. Returns the connections to close to
/// give the room back.
async fn fill_budget(addr: SocketAddr) -> Vec<TcpStream> {
    let mut held = Vec::new();
    let mut length = HOLD_MAX;
    while length >= HOLD_MIN {
        // Bounded: the budget holds at most 819 MiB, 13 requests of each size.
        for _ in 0..64 {
            match hold(addr, length).await {
                Some(stream) => held.push(stream),
                None => break,
            }
        }
        length /= 4;
    }
    assert!(!held.is_empty(), "some requests were admitted");
    held
}

fn refused(metrics: &str, reason: &str) -> f64 {
    support::metric_value(
        metrics,
        "tailgate_receiver_refused_requests_total",
        &[&format!("reason=\"{reason}\""), "transport=\"http\""],
    )
}

/// A child process killed when dropped, so that a failing test leaves none behind.
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Waits up to `limit` for the child to exit (killing it then); returns whether it
/// succeeded, with its stdout and stderr (read as they come, so a full pipe never stalls it).
fn finish(mut child: KillOnDrop, limit: Duration) -> (bool, String, String) {
    fn drain(pipe: Option<impl Read + Send + 'static>) -> std::thread::JoinHandle<String> {
        std::thread::spawn(move || {
            let mut text = String::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_string(&mut text);
            }
            text
        })
    }
    let stdout = drain(child.0.stdout.take());
    let stderr = drain(child.0.stderr.take());
    let deadline = std::time::Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.0.try_wait().expect("child status") {
            break Some(status);
        }
        if std::time::Instant::now() >= deadline {
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    drop(child);
    let stdout = stdout.join().expect("stdout reader");
    let stderr = stderr.join().expect("stderr reader");
    (status.is_some_and(|s| s.success()), stdout, stderr)
}

/// Scenario: an in-process gateway with a memory limiter whose budget is filled by held
/// requests (less than 16 KiB left); the OpenTelemetry Python SDK (`opentelemetry-sdk` and
/// `opentelemetry-exporter-otlp-proto-http`, through `requests`, which writes the whole
/// body before reading) exports 400 spans over OTLP/HTTP protobuf in requests of about
/// 60 KiB; once the gateway has refused some of them, the held requests are closed and the
/// budget is free again.
/// Guarantees: the gateway counts refusals as `reason="overloaded"` on HTTP; the SDK's
/// own session saw 503 answers and no connection error (no broken pipe, no reset); every
/// export call finally succeeded (the SDK retried after Retry-After); every span is
/// accepted once and reaches the sink exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_sdk_retries_early_refusals_and_delivers_every_span() {
    let python = venv_python();
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/python/send_spans.py");
    let sink = OtlpSink::start(SinkBehavior::Accept).await;
    let gateway = support::start_gateway(&limited_config(sink.addr)).await;
    let addr = support::http_addr(&gateway);

    let held = fill_budget(addr).await;
    let before = refused(&support::scrape(&gateway).await, "overloaded");
    assert!(before > 0.0, "filling the budget ended with a refusal");

    let child = Command::new(&python)
        .arg(&script)
        .arg(format!("http://{addr}/v1/traces"))
        .arg(PYTHON_SPANS.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python starts");
    let child = KillOnDrop(child);

    // Pressure until the gateway has refused the SDK at least twice.
    let pushed_back = support::eventually(Duration::from_secs(30), || {
        let gateway = &gateway;
        async move { refused(&support::scrape(gateway).await, "overloaded") >= before + 2.0 }
    })
    .await;
    let after = refused(&support::scrape(&gateway).await, "overloaded");
    // Relief: the held requests end and give their reservations back.
    drop(held);

    let (succeeded, stdout, stderr) =
        tokio::task::spawn_blocking(move || finish(child, Duration::from_secs(120)))
            .await
            .expect("python waiter");
    assert!(
        pushed_back,
        "the gateway refused the SDK ({after} refusals, {before} before)"
    );
    assert!(succeeded, "python exited cleanly:\n{stdout}\n{stderr}");
    let report: serde_json::Value =
        serde_json::from_str(stdout.lines().last().expect("the report line"))
            .expect("a JSON report");
    eprintln!("python_sdk: {report}");
    let statuses: Vec<u64> = report["statuses"]
        .as_array()
        .expect("statuses")
        .iter()
        .filter_map(serde_json::Value::as_u64)
        .collect();
    assert!(
        statuses.contains(&503),
        "the SDK read 503 answers: {report}"
    );
    assert!(
        statuses.iter().all(|&s| s == 200 || s == 503),
        "only 200 and 503: {report}"
    );
    assert_eq!(
        report["connection_errors"].as_array().map(Vec::len),
        Some(0),
        "no connection error: {report}"
    );
    let exports = report["exports"].as_array().expect("exports");
    assert_eq!(exports.len(), PYTHON_SPANS / 50, "{report}");
    assert!(
        exports.iter().all(|ok| ok.as_bool() == Some(true)),
        "every export succeeded: {report}"
    );
    assert_eq!(report["flushed"].as_bool(), Some(true), "{report}");

    let arrived = support::eventually(Duration::from_secs(20), || {
        let handle = sink.handle.clone();
        async move { handle.span_count() >= PYTHON_SPANS }
    })
    .await;
    let metrics = support::scrape(&gateway).await;
    gateway.shutdown().await;
    assert!(arrived, "{} spans arrived", sink.handle.span_count());
    assert_eq!(
        support::metric_value(
            &metrics,
            "otelcol_receiver_accepted_spans_total",
            &["transport=\"http\""],
        ),
        PYTHON_SPANS as f64,
        "each span was accepted once"
    );
    let mut seen: HashMap<i64, usize> = HashMap::new();
    for received in sink.handle.spans() {
        let seq = received
            .span
            .attributes
            .iter()
            .find(|kv| kv.key == "seq")
            .and_then(|kv| kv.value.as_ref()?.value.as_ref())
            .and_then(|value| match value {
                any_value::Value::IntValue(seq) => Some(*seq),
                _ => None,
            })
            .expect("every span has its seq");
        *seen.entry(seq).or_default() += 1;
    }
    assert_eq!(seen.len(), PYTHON_SPANS, "every span arrived");
    assert!(
        seen.values().all(|&n| n == 1),
        "no span arrived twice: {:?}",
        seen.iter().filter(|(_, n)| **n > 1).collect::<Vec<_>>()
    );
}

/// What a body-first client read back.
#[derive(Debug)]
struct RawAnswer {
    status: u16,
    headers: HashMap<String, String>,
    body: Vec<u8>,
    /// Whether an interim `100 Continue` came before the final answer.
    continued: bool,
    /// The status of an empty request sent next on the same connection, when one was.
    follow_up: Option<u16>,
}

/// Writes the head and then the whole `body` before reading anything, as Python's
/// http.client does, then reads one complete response (its head and `Content-Length`
/// bytes of body), then sends an empty request on the same connection and reads its
/// answer too (the connection was kept: the refused body was read to its end). `Err`
/// names a broken pipe, a reset or an incomplete answer.
fn body_first(addr: SocketAddr, headers: &str, body: &[u8]) -> Result<RawAnswer, String> {
    let mut stream = std::net::TcpStream::connect(addr).map_err(|e| format!("connect: {e}"))?;
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .and_then(|()| stream.set_write_timeout(Some(Duration::from_secs(30))))
        .map_err(|e| format!("timeouts: {e}"))?;
    let head = format!(
        "POST /v1/traces HTTP/1.1\r\nhost: {addr}\r\ncontent-length: {}\r\n{headers}\r\n",
        body.len()
    );
    stream
        .write_all(head.as_bytes())
        .map_err(|e| format!("writing the head: {e}"))?;
    stream
        .write_all(body)
        .map_err(|e| format!("writing the body: {e}"))?;
    let mut answer = read_answer(&mut stream)?;
    let empty =
        format!("POST /v1/traces HTTP/1.1\r\nhost: {addr}\r\n{PROTOBUF}content-length: 0\r\n\r\n");
    stream
        .write_all(empty.as_bytes())
        .map_err(|e| format!("writing the next request: {e}"))?;
    let next = read_answer(&mut stream).map_err(|e| format!("the next request: {e}"))?;
    answer.follow_up = Some(next.status);
    Ok(answer)
}

/// Reads responses until a final one (skipping `100 Continue`) and its body.
fn read_answer(stream: &mut std::net::TcpStream) -> Result<RawAnswer, String> {
    let mut data = Vec::new();
    let mut continued = false;
    let mut buf = [0u8; 8192];
    // Bounded: each read waits at most the read timeout, and an answer is small.
    for _ in 0..1000 {
        if let Some(end) = data.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&data[..end]).into_owned();
            let mut lines = head.split("\r\n");
            let status: u16 = lines
                .next()
                .and_then(|line| line.split(' ').nth(1))
                .and_then(|code| code.parse().ok())
                .ok_or_else(|| format!("not an HTTP answer: {head}"))?;
            if status == 100 {
                continued = true;
                data.drain(..end + 4);
                continue;
            }
            let headers: HashMap<String, String> = lines
                .filter_map(|line| line.split_once(':'))
                .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
                .collect();
            let length: usize = headers
                .get("content-length")
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| format!("no content-length: {head}"))?;
            if data.len() >= end + 4 + length {
                return Ok(RawAnswer {
                    status,
                    headers,
                    body: data[end + 4..end + 4 + length].to_vec(),
                    continued,
                    follow_up: None,
                });
            }
        }
        let read = stream
            .read(&mut buf)
            .map_err(|e| format!("reading the answer: {e}"))?;
        if read == 0 {
            return Err(format!(
                "connection closed after {} bytes of answer",
                data.len()
            ));
        }
        data.extend_from_slice(&buf[..read]);
    }
    Err("the answer never ended".into())
}

/// Sends the head only, with `Expect: 100-continue`, and reads the answer without
/// sending the body.
fn expect_continue(addr: SocketAddr, headers: &str, length: usize) -> Result<RawAnswer, String> {
    let mut stream = std::net::TcpStream::connect(addr).map_err(|e| format!("connect: {e}"))?;
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(|e| format!("timeout: {e}"))?;
    let head = format!(
        "POST /v1/traces HTTP/1.1\r\nhost: {addr}\r\ncontent-length: {length}\r\n\
         expect: 100-continue\r\n{headers}\r\n"
    );
    stream
        .write_all(head.as_bytes())
        .map_err(|e| format!("writing the head: {e}"))?;
    read_answer(&mut stream)
}

/// Runs a blocking raw client off the runtime.
async fn raw<F>(client: F) -> Result<RawAnswer, String>
where
    F: FnOnce() -> Result<RawAnswer, String> + Send + 'static,
{
    tokio::task::spawn_blocking(client)
        .await
        .expect("client thread")
}

const PROTOBUF: &str = "content-type: application/x-protobuf\r\n";

/// Checks a complete refusal: the status, `Retry-After: 1` exactly when retryable, a
/// body (an OTLP Status), no `100 Continue` before it, and the answer to the request sent
/// next on the connection (`follow_up`). Returns what is wrong.
fn refusal_problem(
    what: &str,
    answer: Result<RawAnswer, String>,
    status: u16,
    follow_up: Option<u16>,
) -> Option<String> {
    let answer = match answer {
        Ok(answer) => answer,
        Err(error) => return Some(format!("{what}: no answer read: {error}")),
    };
    let retry_after = matches!(status, 429 | 503).then_some("1");
    let fine = answer.status == status
        && answer.headers.get("retry-after").map(String::as_str) == retry_after
        && !answer.body.is_empty()
        && !answer.continued
        && answer.follow_up == follow_up;
    (!fine).then(|| {
        format!(
            "{what}: wanted {status} (Retry-After {retry_after:?}, then {follow_up:?}), got \
             {answer:?}"
        )
    })
}

/// Scenario: a raw TCP client writes the head and a whole 8 MiB body before reading,
/// against each refusal made before the body is read: the memory budget full (a gateway
/// whose budget is filled by held requests), `max_concurrent_requests: 1` taken by a held
/// request, a declared length over `max_request_body_size: 1 MiB`, `Content-Type:
/// text/plain`, `Content-Encoding: br`; then the same refusals asked with `Expect:
/// 100-continue` and no body sent.
/// Guarantees: every time the client reads a complete response (no broken pipe, no reset)
/// with the right status: 503 with `Retry-After: 1` for the budget and the in-flight limit,
/// 413, 415 and 400 without it; the refused body is read to its end, so the connection
/// stays open and answers the next request; with `Expect: 100-continue` the final status
/// comes without a `100 Continue` and without the body sent; refusals are counted by
/// reason; the memory budget is not charged for refused bodies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn body_first_clients_read_every_early_refusal() {
    let body: &'static [u8] = Box::leak(vec![0x0a_u8; LARGE_BODY].into_boxed_slice());
    let mut problems: Vec<String> = Vec::new();
    let sink = OtlpSink::start(SinkBehavior::Accept).await;

    // The memory budget full.
    let gateway = support::start_gateway(&limited_config(sink.addr)).await;
    let addr = support::http_addr(&gateway);
    let held = fill_budget(addr).await;
    let used = support::metric_value(
        &support::scrape(&gateway).await,
        "tailgate_memory_budget_used_bytes",
        &[],
    );
    let before = refused(&support::scrape(&gateway).await, "overloaded");
    problems.extend(refusal_problem(
        "budget full",
        raw(move || body_first(addr, PROTOBUF, body)).await,
        503,
        Some(200),
    ));
    problems.extend(refusal_problem(
        "budget full, expect 100-continue",
        raw(move || expect_continue(addr, PROTOBUF, LARGE_BODY)).await,
        503,
        None,
    ));
    let metrics = support::scrape(&gateway).await;
    assert_eq!(refused(&metrics, "overloaded"), before + 2.0);
    assert_eq!(
        support::metric_value(&metrics, "tailgate_memory_budget_used_bytes", &[]),
        used,
        "refused bodies are not charged"
    );
    drop(held);
    gateway.shutdown().await;

    // The in-flight limit taken.
    let config = support::gateway_config(sink.addr, "").replace(
        "      http:\n        endpoint: 127.0.0.1:0\n",
        "      http:\n        endpoint: 127.0.0.1:0\n        max_concurrent_requests: 1\n",
    );
    let gateway = support::start_gateway(&config).await;
    let addr = support::http_addr(&gateway);
    let slot = hold(addr, 1024).await.expect("the only slot");
    problems.extend(refusal_problem(
        "too many requests",
        raw(move || body_first(addr, PROTOBUF, body)).await,
        503,
        Some(503),
    ));
    problems.extend(refusal_problem(
        "too many requests, expect 100-continue",
        raw(move || expect_continue(addr, PROTOBUF, LARGE_BODY)).await,
        503,
        None,
    ));
    assert_eq!(
        refused(&support::scrape(&gateway).await, "too_many_requests"),
        3.0
    );
    drop(slot);
    gateway.shutdown().await;

    // Refusals decided from the headers.
    let config = support::gateway_config(sink.addr, "").replace(
        "      http:\n        endpoint: 127.0.0.1:0\n",
        "      http:\n        endpoint: 127.0.0.1:0\n        max_request_body_size: 1048576\n",
    );
    let gateway = support::start_gateway(&config).await;
    let addr = support::http_addr(&gateway);
    let cases = [
        ("declared too large", PROTOBUF.to_owned(), 413),
        (
            "content type",
            "content-type: text/plain\r\n".to_owned(),
            415,
        ),
        (
            "content encoding",
            format!("{PROTOBUF}content-encoding: br\r\n"),
            400,
        ),
    ];
    for (what, headers, status) in cases {
        let sent = headers.clone();
        problems.extend(refusal_problem(
            what,
            raw(move || body_first(addr, &sent, body)).await,
            status,
            Some(200),
        ));
        problems.extend(refusal_problem(
            &format!("{what}, expect 100-continue"),
            raw(move || expect_continue(addr, &headers, LARGE_BODY)).await,
            status,
            None,
        ));
    }
    let metrics = support::scrape(&gateway).await;
    gateway.shutdown().await;
    assert!(problems.is_empty(), "{problems:#?}");
    assert_eq!(
        support::metric_value(
            &metrics,
            "tailgate_receiver_refused_requests_total",
            &["transport=\"http\""],
        ),
        6.0,
        "{metrics}"
    );
    assert_eq!(sink.handle.span_count(), 0, "nothing refused was delivered");
}
