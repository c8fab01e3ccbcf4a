//! `tailgate-loadgen`: sends realistic OTLP traces to any OTLP endpoint and reports what
//! was accepted. See `tailgate::loadgen` for what it generates and how it sends.
//!
//! Exit status: 0 when every span was accepted, 2 when some were refused or got no
//! answer, 1 when the options are wrong or a file cannot be written.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use tailgate::loadgen::{GeneratorConfig, LoadConfig, Protocol, SendConfig, Shape};

/// Trace shapes.
#[derive(Clone, Copy, Debug, ValueEnum)]
enum ShapeArg {
    /// A Kubernetes operator's reconcile: 6 spans in 2 services, ~10 attributes each.
    Operator,
    /// A tree of `--fanout` children per span, `--depth` levels.
    Fanout,
}

/// Generates realistic OTLP traces and sends them to an OTLP endpoint.
///
/// A run must be bounded: give --spans, --duration, or both.
#[derive(Debug, Parser)]
#[command(name = "tailgate-loadgen", version)]
struct Args {
    /// The transport.
    #[arg(long, value_enum, default_value = "grpc")]
    protocol: Protocol,
    /// `host:port` or URL [default: http://127.0.0.1:4317 for gRPC,
    /// http://127.0.0.1:4318/v1/traces for HTTP].
    #[arg(long)]
    endpoint: Option<String>,
    /// Compress requests with gzip.
    #[arg(long)]
    gzip: bool,
    /// Speak TLS, trusting the CA certificates (PEM) in FILE; an endpoint without a scheme
    /// then means https:// (an https:// endpoint without it trusts the Mozilla roots).
    #[arg(long, value_name = "FILE")]
    tls_ca: Option<PathBuf>,
    /// Concurrent connections, each with one request in flight.
    #[arg(long, default_value_t = 4)]
    connections: usize,
    /// Spans per second to offer [default: as fast as they are accepted].
    #[arg(long, value_name = "SPANS_PER_SEC")]
    rate: Option<f64>,
    /// Stop after the trace that reaches this many spans.
    #[arg(long)]
    spans: Option<u64>,
    /// Stop generating after this long (e.g. 30s, 2m).
    #[arg(long, value_parser = humantime::parse_duration)]
    duration: Option<Duration>,
    /// Spans per request.
    #[arg(long, default_value_t = 100)]
    batch_spans: usize,
    /// Seed: the same seed gives the same traces and ids.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Trace shape.
    #[arg(long, value_enum, default_value = "operator")]
    shape: ShapeArg,
    /// Children per span (fanout shape).
    #[arg(long, default_value_t = 3)]
    fanout: u32,
    /// Levels, root included (fanout shape).
    #[arg(long, default_value_t = 3)]
    depth: u32,
    /// Attributes per span [default: the shape's own, about 10]; more are padded with
    /// `app.extra.<n>` strings.
    #[arg(long)]
    attributes: Option<usize>,
    /// Bytes of each padding attribute value.
    #[arg(long, default_value_t = 32)]
    attribute_bytes: usize,
    /// Share of traces with an ERROR status on one random span.
    #[arg(long, default_value_t = 0.01)]
    error_ratio: f64,
    /// Share of traces whose root lasts more than 1 s.
    #[arg(long, default_value_t = 0.01)]
    slow_ratio: f64,
    /// Share of traces whose spans are split: part held back and sent later.
    #[arg(long, default_value_t = 0.0)]
    split_ratio: f64,
    /// How much later the held-back spans of a split trace are sent.
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
    lateness: Duration,
    /// Attempts per request, the first included.
    #[arg(long, default_value_t = 8)]
    max_attempts: u32,
    /// Per-request timeout.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    timeout: Duration,
    /// Write the ground truth here: one JSON line per trace,
    /// `{"trace_id": hex, "spans": n, "error": bool, "slow": bool}`.
    #[arg(long, value_name = "FILE")]
    expect: Option<PathBuf>,
    /// Also write the summary as JSON here.
    #[arg(long, value_name = "FILE")]
    summary_json: Option<PathBuf>,
    /// No live progress line (it only shows when stderr is a terminal anyway).
    #[arg(long)]
    quiet: bool,
    /// Send `authorization: Bearer TOKEN` with every request (gRPC metadata or HTTP
    /// header), for a receiver that requires a bearertokenauth token.
    #[arg(long, value_name = "TOKEN")]
    token: Option<String>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let shape = match args.shape {
        ShapeArg::Operator => Shape::Operator,
        ShapeArg::Fanout => Shape::Fanout {
            fanout: args.fanout,
            depth: args.depth,
        },
    };
    let config = LoadConfig {
        generator: GeneratorConfig {
            shape,
            attributes: args.attributes,
            attribute_bytes: args.attribute_bytes,
            error_ratio: args.error_ratio,
            slow_ratio: args.slow_ratio,
        },
        send: SendConfig {
            protocol: args.protocol,
            endpoint: args
                .endpoint
                .unwrap_or_else(|| args.protocol.default_endpoint().to_owned()),
            gzip: args.gzip,
            timeout: args.timeout,
            tls_ca: args.tls_ca,
            token: args.token.map(tailgate::config::Secret::new),
        },
        connections: args.connections,
        rate: args.rate,
        spans: args.spans,
        duration: args.duration,
        batch_spans: args.batch_spans,
        seed: args.seed,
        split_ratio: args.split_ratio,
        lateness: args.lateness,
        max_attempts: args.max_attempts,
        expect: args.expect,
        progress: !args.quiet,
    };
    if let Err(error) = config.validate() {
        eprintln!("tailgate-loadgen: {error}");
        return ExitCode::from(1);
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("tailgate-loadgen: starting the runtime: {error}");
            return ExitCode::from(1);
        }
    };
    let summary = match runtime.block_on(tailgate::loadgen::run(config)) {
        Ok(summary) => summary,
        Err(error) => {
            eprintln!("tailgate-loadgen: {error}");
            return ExitCode::from(1);
        }
    };
    #[allow(clippy::print_stdout)]
    {
        print!("{}", summary.to_text());
    }
    if let Some(path) = args.summary_json {
        let written = serde_json::to_vec_pretty(&summary)
            .map_err(std::io::Error::other)
            .and_then(|json| std::fs::write(&path, json));
        if let Err(error) = written {
            eprintln!("tailgate-loadgen: writing {}: {error}", path.display());
            return ExitCode::from(1);
        }
    }
    if summary.accepted_spans == summary.sent_spans {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(2)
    }
}
