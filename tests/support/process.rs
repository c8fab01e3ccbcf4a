//! The `tailgate` binary as a child process: started from a config, its ports read from
//! its startup log, stopped with a signal; and a watcher of its resident memory.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// A running `tailgate` process.
pub struct GatewayProcess {
    child: Child,
    /// The OTLP/gRPC address (`host:port`).
    pub grpc: String,
    /// The `/metrics` URL.
    pub metrics_url: String,
    log: Option<std::thread::JoinHandle<Vec<String>>>,
    _dir: tempfile::TempDir,
}

impl GatewayProcess {
    /// Starts the binary with `config` (which must bind the gRPC receiver `otlp` and the
    /// metrics endpoint, on port 0 for example) and waits for both to be announced.
    pub fn start(config: &str) -> Self {
        Self::start_with_env(config, &[])
    }

    /// Like [`start`](Self::start), with `env` added to the process's environment.
    pub fn start_with_env(config: &str, env: &[(&str, &str)]) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("config.yaml");
        std::fs::write(&path, config).expect("write config");
        let mut child = Command::new(env!("CARGO_BIN_EXE_tailgate"))
            .args(["--config", path.to_str().expect("utf-8")])
            .env("RUST_LOG", "info")
            .envs(env.iter().copied())
            .stderr(Stdio::piped())
            .spawn()
            .expect("tailgate starts");
        let stderr = child.stderr.take().expect("stderr piped");
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let log = std::thread::spawn(move || {
            let mut lines = Vec::new();
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let announced = if line.contains("telemetry.metrics.started") {
                    Some("metrics")
                } else if line.contains("receiver.grpc.started")
                    && field(&line, "receiver") == Some("otlp")
                {
                    Some("grpc")
                } else {
                    None
                };
                if let (Some(what), Some(endpoint)) = (announced, field(&line, "endpoint")) {
                    let _ = ready_tx.send((what, endpoint.to_owned()));
                }
                lines.push(line);
            }
            lines
        });
        let mut endpoints = HashMap::new();
        while endpoints.len() < 2 {
            let (what, endpoint) = ready_rx
                .recv_timeout(Duration::from_secs(20))
                .expect("gateway announces its gRPC (receiver otlp) and metrics ports");
            endpoints.insert(what, endpoint);
        }
        Self {
            child,
            grpc: endpoints["grpc"].clone(),
            metrics_url: format!("http://{}/metrics", endpoints["metrics"]),
            log: Some(log),
            _dir: dir,
        }
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends SIGTERM.
    pub fn sigterm(&self) {
        let status = Command::new("kill")
            .args(["-TERM", &self.pid().to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success());
    }

    /// Kills the process with SIGKILL (as the kernel's OOM killer does) and reaps it:
    /// nothing of its shutdown runs. Returns its log.
    pub fn kill9(mut self) -> Vec<String> {
        self.child.kill().expect("SIGKILL delivered");
        let status = self.child.wait().expect("reaped");
        assert!(!status.success(), "killed, not exited: {status}");
        self.log
            .take()
            .map(|log| log.join().unwrap_or_default())
            .unwrap_or_default()
    }

    /// Waits up to `limit` for the process to exit; returns its status and its log.
    pub async fn wait(mut self, limit: Duration) -> (Option<ExitStatus>, Vec<String>) {
        let deadline = tokio::time::Instant::now() + limit;
        let mut status = None;
        while tokio::time::Instant::now() < deadline {
            if let Some(exited) = self.child.try_wait().expect("wait works") {
                status = Some(exited);
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        if status.is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        let lines = self
            .log
            .take()
            .map(|log| log.join().unwrap_or_default())
            .unwrap_or_default();
        (status, lines)
    }
}

/// The value of `name=value` in a log line (up to the next space).
fn field<'a>(line: &'a str, name: &str) -> Option<&'a str> {
    let start = line.find(&format!(" {name}="))? + name.len() + 2;
    line[start..].split_whitespace().next()
}

impl Drop for GatewayProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Samples a process's resident set size every 20ms and keeps the peak.
pub struct RssWatcher {
    peak: Arc<AtomicU64>,
    running: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl RssWatcher {
    /// Starts watching `pid`.
    pub fn start(pid: u32) -> Self {
        let peak = Arc::new(AtomicU64::new(0));
        let running = Arc::new(AtomicBool::new(true));
        let thread = {
            let (peak, running) = (peak.clone(), running.clone());
            std::thread::spawn(move || {
                while running.load(Ordering::Relaxed) {
                    if let Some(rss) = rss_bytes(pid) {
                        peak.fetch_max(rss, Ordering::Relaxed);
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
            })
        };
        Self {
            peak,
            running,
            thread: Some(thread),
        }
    }

    /// Stops watching and returns the peak in MiB.
    pub fn stop(mut self) -> f64 {
        self.running.store(false, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        self.peak.load(Ordering::Relaxed) as f64 / f64::from(1 << 20)
    }
}

fn rss_bytes(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    Some(line.split_whitespace().nth(1)?.parse::<u64>().ok()? * 1024)
}

/// Runs `tailgate print-config --config <path>` to its end: its exit status and output.
pub fn print_config(path: &std::path::Path) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_tailgate"))
        .args([
            "print-config",
            "--config",
            path.to_str().expect("utf-8 path"),
        ])
        .output()
        .expect("print-config runs")
}
