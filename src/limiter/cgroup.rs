//! The memory a percentage limit is a percentage of: the container's cgroup limit (v2
//! `memory.max`, else v1 `memory.limit_in_bytes`), else the machine's total memory.

use std::path::Path;

/// Where the total came from, for the startup log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TotalSource {
    /// cgroup v2 `memory.max`.
    CgroupV2,
    /// cgroup v1 `memory.limit_in_bytes`.
    CgroupV1,
    /// `MemTotal` of `/proc/meminfo`: no container limit is set.
    MachineTotal,
}

/// The memory available to this process, in bytes, and where that figure came from.
pub fn total_memory() -> Option<(u64, TotalSource)> {
    let machine = machine_total();
    let limited = |limit: u64| machine.is_none_or(|total| limit < total);
    if let Some(limit) = read_limit(Path::new("/sys/fs/cgroup/memory.max"))
        && limited(limit)
    {
        return Some((limit, TotalSource::CgroupV2));
    }
    if let Some(limit) = read_limit(Path::new("/sys/fs/cgroup/memory/memory.limit_in_bytes"))
        && limited(limit)
    {
        return Some((limit, TotalSource::CgroupV1));
    }
    machine.map(|total| (total, TotalSource::MachineTotal))
}

/// A cgroup limit file: a number of bytes, or `max` (no limit, `None`). cgroup v1 writes a
/// huge number for "no limit", which the caller filters out by comparing with the
/// machine's total.
fn read_limit(path: &Path) -> Option<u64> {
    parse_limit(&std::fs::read_to_string(path).ok()?)
}

fn parse_limit(text: &str) -> Option<u64> {
    let text = text.trim();
    if text == "max" {
        return None;
    }
    text.parse().ok()
}

fn machine_total() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    parse_meminfo_total(&meminfo)
}

fn parse_meminfo_total(meminfo: &str) -> Option<u64> {
    crate::telemetry::proc_kib_field(meminfo, "MemTotal:")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Scenario: the limit files as the kernel writes them.
    /// Guarantees: a number is bytes, `max` is no limit, MemTotal is read in KiB, and on
    /// this machine some total is found.
    #[test]
    fn parses_limits() {
        assert_eq!(parse_limit("1073741824\n"), Some(1 << 30));
        assert_eq!(parse_limit("max\n"), None);
        assert_eq!(parse_limit("garbage"), None);
        assert_eq!(
            parse_meminfo_total("MemTotal:       24576000 kB\nMemFree: 1 kB\n"),
            Some(24_576_000 * 1024)
        );
        let (total, _source) = total_memory().expect("linux exposes a total");
        assert!(total > 0);
    }
}
