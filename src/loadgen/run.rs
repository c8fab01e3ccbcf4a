//! Driving a load: pacing, request assembly, split and late spans, worker connections,
//! retries, progress and the summary.

use std::collections::VecDeque;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use prost::Message;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use tokio::sync::{Mutex, mpsc};
use tokio::time::Instant;

use super::generate::{
    GeneratedSpan, Generator, GeneratorConfig, GeneratorError, Service, build_request,
};
use super::send::{EndpointError, Outcome, SendConfig, Sender};

/// The longest a run may take when only `--spans` bounds it.
pub const DEFAULT_MAX_TIME: Duration = Duration::from_secs(600);

/// Everything one run needs.
#[derive(Clone, Debug)]
pub struct LoadConfig {
    /// What traces look like.
    pub generator: GeneratorConfig,
    /// Where and how to send.
    pub send: SendConfig,
    /// Concurrent connections, each with one request in flight.
    pub connections: usize,
    /// Spans per second to offer; `None` sends as fast as the endpoint accepts.
    pub rate: Option<f64>,
    /// Stop generating after the trace that reaches this many spans.
    pub spans: Option<u64>,
    /// Stop generating after this long.
    pub duration: Option<Duration>,
    /// Spans per request (a request may end mid-trace).
    pub batch_spans: usize,
    /// Seed of the generator (and of split choices).
    pub seed: u64,
    /// Share of traces (0 to 1) whose spans are split: part of them is sent later, in a
    /// later request (so often on another connection).
    pub split_ratio: f64,
    /// How much later the held-back part of a split trace is sent.
    pub lateness: Duration,
    /// Attempts per request, the first included, before its spans count as refused.
    pub max_attempts: u32,
    /// Write the ground truth of every generated trace here, one JSON line each.
    pub expect: Option<PathBuf>,
    /// Show a live progress line on stderr (only when stderr is a terminal).
    pub progress: bool,
}

/// Why a run could not start or finish.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// Neither `--spans` nor `--duration`.
    #[error("refusing to run unbounded: give --spans N, --duration D, or both")]
    Unbounded,
    /// A bad option.
    #[error("{0}")]
    Invalid(String),
    /// A bad generator option.
    #[error(transparent)]
    Generator(#[from] GeneratorError),
    /// A bad endpoint.
    #[error(transparent)]
    Endpoint(#[from] EndpointError),
    /// The `--expect` file.
    #[error("writing {path}: {source}")]
    Expect {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
}

/// Request latency figures, in milliseconds.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Latency {
    /// Median.
    pub p50_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
    /// Slowest.
    pub max_ms: f64,
}

/// What a run did. Spans are counted per request: a request's spans are `accepted` when
/// an attempt was accepted, `refused` when every attempt was refused or one was rejected,
/// `failed` when the last attempt got no answer.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Summary {
    /// Traces generated.
    pub traces: u64,
    /// Spans generated and handed to a connection.
    pub sent_spans: u64,
    /// Spans in accepted requests.
    pub accepted_spans: u64,
    /// Spans in requests refused for good (after the last retry, or not retryable).
    pub refused_spans: u64,
    /// Spans in requests that never got an answer.
    pub failed_spans: u64,
    /// Spans sent again after a retryable refusal or a failure (once per retry).
    pub retried_spans: u64,
    /// Requests sent (first attempts).
    pub requests: u64,
    /// Attempts answered with a retryable refusal.
    pub refusals: u64,
    /// Attempts without an answer (connection errors, timeouts).
    pub errors: u64,
    /// Encoded (uncompressed protobuf) bytes of the requests sent, first attempts.
    pub bytes: u64,
    /// Wall time from the first request to the last answer, seconds.
    pub elapsed_s: f64,
    /// `accepted_spans / elapsed_s`.
    pub accepted_spans_per_s: f64,
    /// Per-attempt latency.
    pub latency: Latency,
    /// The first non-retryable rejection or failure, if any, to say what went wrong.
    pub first_error: Option<String>,
}

impl Summary {
    /// Plain-text report for people.
    pub fn to_text(&self) -> String {
        let mut out = format!(
            "traces {}  spans sent {}  accepted {}  refused {}  failed {}  retried {}\n\
             requests {}  refusals {}  errors {}  bytes {} ({:.0} B/span)\n\
             elapsed {:.2}s  rate {:.0} spans/s  latency p50 {:.2} ms  p99 {:.2} ms  max {:.2} ms\n",
            self.traces,
            self.sent_spans,
            self.accepted_spans,
            self.refused_spans,
            self.failed_spans,
            self.retried_spans,
            self.requests,
            self.refusals,
            self.errors,
            self.bytes,
            self.bytes as f64 / self.sent_spans.max(1) as f64,
            self.elapsed_s,
            self.accepted_spans_per_s,
            self.latency.p50_ms,
            self.latency.p99_ms,
            self.latency.max_ms,
        );
        if let Some(error) = &self.first_error {
            out.push_str(&format!("first error: {error}\n"));
        }
        out
    }
}

#[derive(Default)]
struct Counters {
    sent: AtomicU64,
    accepted: AtomicU64,
    refused: AtomicU64,
    failed: AtomicU64,
    retried: AtomicU64,
    requests: AtomicU64,
    refusals: AtomicU64,
    errors: AtomicU64,
    bytes: AtomicU64,
}

struct Job {
    request: opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest,
    spans: u64,
}

/// Requests being assembled, and the queue to the connections.
struct Outbox {
    pending: Vec<GeneratedSpan>,
    batch: usize,
    tx: mpsc::Sender<Job>,
    counters: Arc<Counters>,
    /// Requests handed over so far.
    requests: u64,
    deadline: Instant,
}

impl Outbox {
    /// Hands over full requests (and with `all`, the last partial one). False when the
    /// deadline passed or the connections are gone; the spans not handed over count as
    /// failed.
    async fn flush(&mut self, services: &[Service], all: bool) -> bool {
        while self.pending.len() >= self.batch || (all && !self.pending.is_empty()) {
            let rest = self.pending.split_off(self.pending.len().min(self.batch));
            let spans = std::mem::replace(&mut self.pending, rest);
            let n = spans.len() as u64;
            let request = build_request(services, spans);
            self.counters
                .bytes
                .fetch_add(request.encoded_len() as u64, Ordering::Relaxed);
            self.counters.sent.fetch_add(n, Ordering::Relaxed);
            self.requests += 1;
            let job = Job { request, spans: n };
            if !matches!(
                tokio::time::timeout_at(self.deadline, self.tx.send(job)).await,
                Ok(Ok(()))
            ) {
                self.counters.failed.fetch_add(n, Ordering::Relaxed);
                return false;
            }
        }
        true
    }
}

/// A held-back part of a split trace.
struct Late {
    due: Instant,
    /// Only requests numbered at least this take it: never the one its trace started in.
    from_request: u64,
    spans: Vec<GeneratedSpan>,
}

fn unix_nanos() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

impl LoadConfig {
    /// Checks the options that do not belong to the generator or the endpoint.
    ///
    /// # Errors
    ///
    /// When the run would be unbounded or an option is out of range.
    pub fn validate(&self) -> Result<(), LoadError> {
        if self.spans.is_none() && self.duration.is_none() {
            return Err(LoadError::Unbounded);
        }
        if self.spans == Some(0) || self.duration == Some(Duration::ZERO) {
            return Err(LoadError::Invalid(
                "--spans and --duration must be greater than 0".into(),
            ));
        }
        if self.connections == 0 || self.batch_spans == 0 || self.max_attempts == 0 {
            return Err(LoadError::Invalid(
                "--connections, --batch-spans and --max-attempts must be at least 1".into(),
            ));
        }
        if let Some(rate) = self.rate
            && !(rate.is_finite() && rate > 0.0)
        {
            return Err(LoadError::Invalid(format!(
                "--rate must be a positive number of spans per second, got {rate}"
            )));
        }
        if !(0.0..=1.0).contains(&self.split_ratio) {
            return Err(LoadError::Invalid(format!(
                "--split-ratio must be between 0 and 1, got {}",
                self.split_ratio
            )));
        }
        Ok(())
    }
}

/// Runs the load to its bound and returns what happened.
///
/// Generation stops at `spans` or `duration`, whichever comes first; held-back spans are
/// then sent when due, and every connection finishes its retries. The whole run is also
/// cut at `duration` (or [`DEFAULT_MAX_TIME`]) plus `lateness` plus one minute, after
/// which requests still queued or retrying count as failed.
///
/// # Errors
///
/// When an option is invalid, the endpoint is not a URI, or the `--expect` file cannot be
/// written.
pub async fn run(config: LoadConfig) -> Result<Summary, LoadError> {
    config.validate()?;
    let mut generator = Generator::new(config.generator.clone(), config.seed)?;
    // Checks the endpoint before anything is generated.
    Sender::new(&config.send)?;
    let mut expect = match &config.expect {
        Some(path) => Some(std::io::BufWriter::new(
            std::fs::File::create(path).map_err(|source| LoadError::Expect {
                path: path.clone(),
                source,
            })?,
        )),
        None => None,
    };
    let expect_err = |source| LoadError::Expect {
        path: config.expect.clone().unwrap_or_default(),
        source,
    };

    let start = Instant::now();
    let generate_for = config.duration.unwrap_or(DEFAULT_MAX_TIME);
    let deadline = start + generate_for + config.lateness + Duration::from_secs(60);
    let counters = Arc::new(Counters::default());
    let first_error: Arc<std::sync::Mutex<Option<String>>> = Arc::default();
    let (tx, rx) = mpsc::channel::<Job>(config.connections * 2);
    let rx = Arc::new(Mutex::new(rx));

    let mut workers = Vec::with_capacity(config.connections);
    for worker in 0..config.connections {
        // A fresh client per connection: for gRPC each owns an HTTP/2 connection.
        // (and for HTTP its own pool), so connections are not shared.
        let sender = Sender::new(&config.send)?;
        workers.push(tokio::spawn(worker_loop(
            sender,
            rx.clone(),
            counters.clone(),
            first_error.clone(),
            config.max_attempts,
            deadline,
            config.seed ^ (worker as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15),
        )));
    }
    let progress = if config.progress && std::io::stderr().is_terminal() {
        Some(tokio::spawn(progress_loop(
            counters.clone(),
            start,
            deadline,
        )))
    } else {
        None
    };

    let mut split_rng = StdRng::seed_from_u64(config.seed.wrapping_add(0x5eed));
    let mut outbox = Outbox {
        pending: Vec::with_capacity(config.batch_spans * 2),
        batch: config.batch_spans,
        tx,
        counters: counters.clone(),
        requests: 0,
        deadline,
    };
    let mut late: VecDeque<Late> = VecDeque::new();
    let mut generated: u64 = 0;
    let mut traces: u64 = 0;
    let generate_until = start + generate_for;

    'generate: loop {
        let now = Instant::now();
        if now >= generate_until || config.spans.is_some_and(|limit| generated >= limit) {
            break;
        }
        if let Some(rate) = config.rate {
            let due = start + Duration::from_secs_f64(generated as f64 / rate);
            if due > now + Duration::from_millis(1) {
                tokio::time::sleep_until(due.min(generate_until)).await;
                continue;
            }
        }
        // Late parts that are due join the request being built.
        while let Some(front) = late.front() {
            if front.due > now || front.from_request > outbox.requests {
                break;
            }
            if let Some(part) = late.pop_front() {
                outbox.pending.extend(part.spans);
            }
        }
        let mut trace = generator.next_trace(unix_nanos());
        traces += 1;
        generated += trace.spans.len() as u64;
        if let Some(out) = expect.as_mut() {
            serde_json::to_writer(&mut *out, &trace.truth())
                .map_err(|e| expect_err(std::io::Error::other(e)))?;
            out.write_all(b"\n").map_err(expect_err)?;
        }
        let n = trace.spans.len();
        if n > 1 && config.split_ratio > 0.0 && split_rng.random_bool(config.split_ratio) {
            // Hold back a random share (at least one span, at most all but one).
            let held = split_rng.random_range(1..n);
            trace.spans.shuffle(&mut split_rng);
            let later = trace.spans.split_off(n - held);
            late.push_back(Late {
                due: now + config.lateness,
                from_request: outbox.requests + 1,
                spans: later,
            });
        }
        outbox.pending.extend(trace.spans);
        if !outbox.flush(generator.services(), false).await {
            break 'generate;
        }
    }
    // Send the held-back parts when due, then whatever is left.
    while let Some(part) = late.pop_front() {
        if part.from_request > outbox.requests {
            outbox.flush(generator.services(), true).await;
        }
        tokio::time::sleep_until(part.due.min(deadline)).await;
        outbox.pending.extend(part.spans);
        outbox.flush(generator.services(), false).await;
    }
    outbox.flush(generator.services(), true).await;
    if let Some(out) = expect.as_mut() {
        out.flush().map_err(expect_err)?;
    }
    drop(outbox);

    let mut latencies: Vec<u32> = Vec::new();
    for worker in workers {
        if let Ok(mut l) = worker.await {
            latencies.append(&mut l);
        }
    }
    let elapsed = start.elapsed().as_secs_f64();
    if let Some(progress) = progress {
        progress.abort();
        eprintln!();
    }
    latencies.sort_unstable();
    let pick = |q: f64| -> f64 {
        if latencies.is_empty() {
            return 0.0;
        }
        let at = ((latencies.len() as f64 - 1.0) * q).round() as usize;
        f64::from(latencies[at.min(latencies.len() - 1)]) / 1000.0
    };
    let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
    let accepted = load(&counters.accepted);
    Ok(Summary {
        traces,
        sent_spans: load(&counters.sent),
        accepted_spans: accepted,
        refused_spans: load(&counters.refused),
        failed_spans: load(&counters.failed),
        retried_spans: load(&counters.retried),
        requests: load(&counters.requests),
        refusals: load(&counters.refusals),
        errors: load(&counters.errors),
        bytes: load(&counters.bytes),
        elapsed_s: elapsed,
        accepted_spans_per_s: accepted as f64 / elapsed.max(1e-9),
        latency: Latency {
            p50_ms: pick(0.50),
            p99_ms: pick(0.99),
            max_ms: pick(1.0),
        },
        first_error: first_error.lock().ok().and_then(|e| e.clone()),
    })
}

/// One connection: takes requests, sends each with bounded retries, and returns the
/// latency of every attempt in microseconds.
async fn worker_loop(
    mut sender: Sender,
    jobs: Arc<Mutex<mpsc::Receiver<Job>>>,
    counters: Arc<Counters>,
    first_error: Arc<std::sync::Mutex<Option<String>>>,
    max_attempts: u32,
    deadline: Instant,
    seed: u64,
) -> Vec<u32> {
    const INITIAL_BACKOFF: Duration = Duration::from_millis(100);
    const MAX_BACKOFF: Duration = Duration::from_secs(5);
    let mut rng = StdRng::seed_from_u64(seed);
    let mut latencies = Vec::new();
    let note = |error: String| {
        if let Ok(mut first) = first_error.lock()
            && first.is_none()
        {
            *first = Some(error);
        }
    };
    loop {
        let job = {
            let mut jobs = jobs.lock().await;
            match tokio::time::timeout_at(deadline, jobs.recv()).await {
                Ok(Some(job)) => job,
                Ok(None) => break,
                Err(_) => {
                    // Out of time: what is still queued is failed.
                    while let Ok(job) = jobs.try_recv() {
                        counters.failed.fetch_add(job.spans, Ordering::Relaxed);
                    }
                    break;
                }
            }
        };
        counters.requests.fetch_add(1, Ordering::Relaxed);
        let body = match sender.encode(&job.request) {
            Ok(body) => body,
            Err(error) => {
                note(error);
                counters.failed.fetch_add(job.spans, Ordering::Relaxed);
                continue;
            }
        };
        drop(job.request);
        let mut backoff = INITIAL_BACKOFF;
        for attempt in 1..=max_attempts {
            let began = Instant::now();
            let outcome = sender.send(body.clone()).await;
            latencies.push(began.elapsed().as_micros().min(u128::from(u32::MAX)) as u32);
            let retry_after = match outcome {
                Outcome::Accepted => {
                    counters.accepted.fetch_add(job.spans, Ordering::Relaxed);
                    break;
                }
                Outcome::Rejected(reason) => {
                    note(reason);
                    counters.refused.fetch_add(job.spans, Ordering::Relaxed);
                    break;
                }
                Outcome::Retryable { retry_after } => {
                    counters.refusals.fetch_add(1, Ordering::Relaxed);
                    if attempt == max_attempts {
                        note("refused after the last retry".into());
                        counters.refused.fetch_add(job.spans, Ordering::Relaxed);
                        break;
                    }
                    retry_after
                }
                Outcome::Failed(reason) => {
                    counters.errors.fetch_add(1, Ordering::Relaxed);
                    if attempt == max_attempts {
                        note(reason);
                        counters.failed.fetch_add(job.spans, Ordering::Relaxed);
                        break;
                    }
                    None
                }
            };
            // Exponential backoff with jitter, or the server's delay; both capped.
            let jittered = backoff.mul_f64(rng.random_range(0.5..1.5));
            let wait = retry_after.unwrap_or(jittered).min(MAX_BACKOFF);
            backoff = (backoff * 2).min(MAX_BACKOFF);
            if Instant::now() + wait >= deadline {
                note("out of time while retrying".into());
                counters.failed.fetch_add(job.spans, Ordering::Relaxed);
                break;
            }
            counters.retried.fetch_add(job.spans, Ordering::Relaxed);
            tokio::time::sleep(wait).await;
        }
    }
    latencies
}

/// Rewrites one stderr line every second until aborted (or the deadline).
async fn progress_loop(counters: Arc<Counters>, start: Instant, deadline: Instant) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let mut last_accepted = 0;
    while Instant::now() < deadline {
        tick.tick().await;
        let accepted = counters.accepted.load(Ordering::Relaxed);
        let mut stderr = std::io::stderr().lock();
        let _ = write!(
            stderr,
            "\r{:>5.0}s  sent {}  accepted {} ({} spans/s)  refused {}  retried {}  errors {}   ",
            start.elapsed().as_secs_f64(),
            counters.sent.load(Ordering::Relaxed),
            accepted,
            accepted - last_accepted,
            counters.refused.load(Ordering::Relaxed),
            counters.retried.load(Ordering::Relaxed),
            counters.errors.load(Ordering::Relaxed),
        );
        let _ = stderr.flush();
        last_accepted = accepted;
    }
}
