//! `otelcol_process_*`: the process's CPU, memory and uptime, read from `/proc` at scrape
//! time; and, when the binary registers its allocator's statistics
//! ([`set_allocator_stats`]), the Collector's two heap gauges and the pages the allocator
//! keeps.

use std::sync::OnceLock;
use std::time::Instant;

use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{Counter, Gauge, Opts};

/// Clock ticks per second of `/proc/<pid>/stat` times: `USER_HZ`, 100 on every Linux ABI.
const USER_HZ: f64 = 100.0;

/// What the memory allocator reports about itself, in bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AllocatorStats {
    /// Bytes in allocations the program holds.
    pub allocated: u64,
    /// Bytes in physically resident pages the allocator has mapped: its allocations,
    /// their slack, its metadata and the freed pages it keeps.
    pub resident: u64,
    /// Bytes of freed pages the allocator keeps resident for reuse instead of returning
    /// them to the OS (jemalloc's dirty pages, returned after its decay time).
    pub dirty: u64,
}

/// How to read the allocator's statistics; see [`set_allocator_stats`].
static ALLOCATOR_STATS: OnceLock<fn() -> Option<AllocatorStats>> = OnceLock::new();

/// Registers how to read the allocator's statistics (the binary's allocator knows how; the
/// library does not pick an allocator), read whenever metrics are gathered by a
/// [`ProcessCollector`] made after this call. Without it, or when it returns `None`, the
/// allocator's gauges are not exposed. Later calls are ignored.
pub fn set_allocator_stats(read: fn() -> Option<AllocatorStats>) {
    let _ = ALLOCATOR_STATS.set(read);
}

/// Reads the process's resource use from `/proc/self` whenever metrics are gathered, and
/// the allocator's statistics when the binary registered them.
///
/// On systems without `/proc` the values stay at zero.
pub struct ProcessCollector {
    started: Instant,
    cpu_seconds: Counter,
    memory_rss: Gauge,
    uptime: Counter,
    heap_alloc: Gauge,
    sys_memory: Gauge,
    allocator_dirty: Gauge,
    allocator_stats: Option<fn() -> Option<AllocatorStats>>,
    descs: Vec<Desc>,
}

impl Default for ProcessCollector {
    fn default() -> Self {
        Self::new()
    }
}

impl ProcessCollector {
    /// A collector whose uptime counts from now, reading the allocator's statistics as
    /// registered with [`set_allocator_stats`] (before this call).
    pub fn new() -> Self {
        Self::with_allocator_stats(ALLOCATOR_STATS.get().copied())
    }

    /// A collector whose uptime counts from now, reading the allocator's statistics with
    /// `allocator_stats` (none: the allocator's gauges are not exposed).
    fn with_allocator_stats(allocator_stats: Option<fn() -> Option<AllocatorStats>>) -> Self {
        let cpu_seconds = counter(
            "otelcol_process_cpu_seconds_total",
            "Total CPU user and system time in seconds.",
        );
        let memory_rss = gauge(
            "otelcol_process_memory_rss",
            "Total physical memory (resident set size) in bytes.",
        );
        let uptime = counter(
            "otelcol_process_uptime_total",
            "Uptime of the process in seconds.",
        );
        // The Collector's names for its Go runtime's `HeapAlloc` and `Sys`, so that its
        // dashboards' heap panels keep working.
        let heap_alloc = gauge(
            "otelcol_process_runtime_heap_alloc_bytes",
            "Bytes of allocated heap objects (the allocator's allocated bytes).",
        );
        let sys_memory = gauge(
            "otelcol_process_runtime_total_sys_memory_bytes",
            "Total bytes of memory obtained from the OS (the allocator's resident bytes: \
             allocations, metadata and freed pages kept for reuse).",
        );
        let allocator_dirty = gauge(
            "tailgate_allocator_dirty_bytes",
            "Bytes of freed pages the allocator keeps resident for reuse instead of \
             returning them to the OS.",
        );
        let descs = [
            cpu_seconds.desc(),
            memory_rss.desc(),
            uptime.desc(),
            heap_alloc.desc(),
            sys_memory.desc(),
            allocator_dirty.desc(),
        ]
        .into_iter()
        .flatten()
        .cloned()
        .collect();
        Self {
            started: Instant::now(),
            cpu_seconds,
            memory_rss,
            uptime,
            heap_alloc,
            sys_memory,
            allocator_dirty,
            allocator_stats,
            descs,
        }
    }
}

fn gauge(name: &str, help: &str) -> Gauge {
    Gauge::with_opts(Opts::new(name, help)).unwrap_or_else(|_| unreachable_metric())
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
        if let Some(stats) = self.allocator_stats.and_then(|read| read()) {
            self.heap_alloc.set(stats.allocated as f64);
            self.sys_memory.set(stats.resident as f64);
            self.allocator_dirty.set(stats.dirty as f64);
            families.extend(self.heap_alloc.collect());
            families.extend(self.sys_memory.collect());
            families.extend(self.allocator_dirty.collect());
        }
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

    fn known_stats() -> Option<AllocatorStats> {
        Some(AllocatorStats {
            allocated: 3 << 20,
            resident: 5 << 20,
            dirty: 1 << 20,
        })
    }

    fn no_stats() -> Option<AllocatorStats> {
        None
    }

    /// Scenario: process metrics gathered with an allocator that reports its statistics,
    /// then with one that cannot (a build without them).
    /// Guarantees: the first exposes allocated bytes as the Collector's heap gauge,
    /// resident bytes as its "memory obtained from the OS" and the kept freed pages, each
    /// with the value read; the second exposes none of the three.
    #[test]
    fn exposes_the_allocators_statistics_when_it_reports_them() {
        let families = ProcessCollector::with_allocator_stats(Some(known_stats)).collect();
        let value = |name: &str| {
            families
                .iter()
                .find(|family| family.name() == name)
                .map(|family| family.get_metric()[0].get_gauge().get_value())
        };
        assert_eq!(
            value("otelcol_process_runtime_heap_alloc_bytes"),
            Some(f64::from(3u32 << 20))
        );
        assert_eq!(
            value("otelcol_process_runtime_total_sys_memory_bytes"),
            Some(f64::from(5u32 << 20))
        );
        assert_eq!(
            value("tailgate_allocator_dirty_bytes"),
            Some(f64::from(1u32 << 20))
        );
        let families = ProcessCollector::with_allocator_stats(Some(no_stats)).collect();
        assert_eq!(families.len(), 3, "only the /proc families");
    }
}
