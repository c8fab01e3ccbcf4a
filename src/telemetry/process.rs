//! `otelcol_process_*`: the process's CPU, memory and uptime, read from `/proc` at scrape
//! time.

use std::time::Instant;

use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{Counter, Gauge, Opts};

/// Clock ticks per second of `/proc/<pid>/stat` times: `USER_HZ`, 100 on every Linux ABI.
const USER_HZ: f64 = 100.0;

/// Reads the process's resource use from `/proc/self` whenever metrics are gathered.
///
/// On systems without `/proc` the values stay at zero.
pub struct ProcessCollector {
    started: Instant,
    cpu_seconds: Counter,
    memory_rss: Gauge,
    uptime: Counter,
    descs: Vec<Desc>,
}

impl Default for ProcessCollector {
    fn default() -> Self {
        Self::new()
    }
}

impl ProcessCollector {
    /// A collector whose uptime counts from now.
    pub fn new() -> Self {
        let cpu_seconds = counter(
            "otelcol_process_cpu_seconds_total",
            "Total CPU user and system time in seconds.",
        );
        let memory_rss = Gauge::with_opts(Opts::new(
            "otelcol_process_memory_rss",
            "Total physical memory (resident set size) in bytes.",
        ))
        .unwrap_or_else(|_| unreachable_metric());
        let uptime = counter(
            "otelcol_process_uptime_total",
            "Uptime of the process in seconds.",
        );
        let descs = [cpu_seconds.desc(), memory_rss.desc(), uptime.desc()]
            .into_iter()
            .flatten()
            .cloned()
            .collect();
        Self {
            started: Instant::now(),
            cpu_seconds,
            memory_rss,
            uptime,
            descs,
        }
    }
}

fn counter(name: &str, help: &str) -> Counter {
    Counter::with_opts(Opts::new(name, help)).unwrap_or_else(|_| unreachable_metric())
}

/// Metric construction only fails for invalid names, which are constants here.
#[allow(clippy::panic)]
fn unreachable_metric<T>() -> T {
    panic!("built-in process metric names are valid")
}

impl Collector for ProcessCollector {
    fn desc(&self) -> Vec<&Desc> {
        self.descs.iter().collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        if let Some(seconds) = read_cpu_seconds() {
            let delta = seconds - self.cpu_seconds.get();
            if delta > 0.0 {
                self.cpu_seconds.inc_by(delta);
            }
        }
        if let Some(bytes) = read_rss_bytes() {
            self.memory_rss.set(bytes as f64);
        }
        let elapsed = self.started.elapsed().as_secs_f64() - self.uptime.get();
        if elapsed > 0.0 {
            self.uptime.inc_by(elapsed);
        }
        let mut families = self.cpu_seconds.collect();
        families.extend(self.memory_rss.collect());
        families.extend(self.uptime.collect());
        families
    }
}

/// User plus system CPU seconds of this process.
pub(crate) fn read_cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The command name (field 2) may hold spaces; fields after its closing paren are fixed.
    let after_comm = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = after_comm.split_whitespace().collect();
    // After the paren: field 3 (state) is index 0, so utime (14) is 11 and stime (15) is 12.
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) / USER_HZ)
}

/// Resident set size of this process in bytes (`VmRSS` of `/proc/self/status`).
pub fn read_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    proc_kib_field(&status, "VmRSS:")
}

/// The value in bytes of the line starting with `key` in a `/proc` file that gives sizes
/// as `Key:   1234 kB` (`/proc/self/status`, `/proc/meminfo`); `None` if the line is
/// missing or not a number.
pub fn proc_kib_field(text: &str, key: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with(key))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Scenario: the process metrics are gathered on Linux.
    /// Guarantees: RSS is positive and the three families carry the Collector's names.
    #[test]
    fn gathers_process_metrics() {
        let collector = ProcessCollector::new();
        let families = collector.collect();
        let names: Vec<&str> = families.iter().map(|f| f.name()).collect();
        assert_eq!(
            names,
            [
                "otelcol_process_cpu_seconds_total",
                "otelcol_process_memory_rss",
                "otelcol_process_uptime_total"
            ]
        );
        assert!(read_rss_bytes().expect("linux has /proc") > 0);
        assert!(read_cpu_seconds().is_some());
    }
}
