//! `processors.memory_limiter`: the Collector's keys, setting tailgate's one memory budget.

use std::time::Duration;

use super::common::{MIB, Reader};
use super::error::Problems;
use super::fields::Fields;
use super::{MemoryAmount, MemoryLimiterConfig, ProcessorConfig};

/// `processors.memory_limiter`.
pub(crate) const PROCESSOR: Reader<ProcessorConfig> = Reader {
    known: &[
        "check_interval",
        "limit_mib",
        "spike_limit_mib",
        "limit_percentage",
        "spike_limit_percentage",
        "min_gc_interval_when_soft_limited",
        "min_gc_interval_when_hard_limited",
        "max_gc_interval_when_soft_limited",
        "max_gc_interval_when_hard_limited",
    ],
    unsupported: &[],
    typed: processor,
};

fn processor(problems: &mut Problems, fields: &Fields<'_>) -> ProcessorConfig {
    let check_interval = match fields.duration(problems, "check_interval") {
        Some(interval) if !interval.is_zero() => interval,
        Some(_) | None => {
            if !fields.wrong_type() {
                problems.add(
                    fields.key_path("check_interval"),
                    "must be greater than 0 (the Collector requires it too); 1s is usual",
                );
            }
            Duration::from_secs(1)
        }
    };
    // The garbage-collector intervals tune Go's runtime; tailgate has no collector to
    // force. Accepted so Collector configs load, and otherwise ignored.
    for key in [
        "min_gc_interval_when_soft_limited",
        "min_gc_interval_when_hard_limited",
        "max_gc_interval_when_soft_limited",
        "max_gc_interval_when_hard_limited",
    ] {
        fields.duration(problems, key);
    }
    let limit_mib = fields.uint(problems, "limit_mib").filter(|&mib| mib > 0);
    let spike_mib = fields
        .uint(problems, "spike_limit_mib")
        .filter(|&mib| mib > 0);
    let limit_percentage = percentage(problems, fields, "limit_percentage");
    let spike_percentage = percentage(problems, fields, "spike_limit_percentage");

    // As in the Collector, limit_mib takes precedence over limit_percentage.
    let (limit, spike) = match (limit_mib, limit_percentage) {
        (Some(mib), _) => {
            let spike = spike_mib.map(|spike| {
                MemoryAmount::Bytes(mebibytes(problems, fields, "spike_limit_mib", spike))
            });
            if let Some(spike) = spike_mib
                && spike >= mib
            {
                problems.add(
                    fields.key_path("spike_limit_mib"),
                    format!("must be less than limit_mib ({mib}), found {spike}"),
                );
            }
            (
                MemoryAmount::Bytes(mebibytes(problems, fields, "limit_mib", mib)),
                spike,
            )
        }
        (None, Some(percent)) => {
            if let Some(spike) = spike_percentage
                && spike >= percent
            {
                problems.add(
                    fields.key_path("spike_limit_percentage"),
                    format!("must be less than limit_percentage ({percent}), found {spike}"),
                );
            }
            (
                MemoryAmount::Percentage(percent),
                spike_percentage.map(MemoryAmount::Percentage),
            )
        }
        (None, None) => {
            if !fields.wrong_type() {
                problems.add(
                    fields.path().to_owned(),
                    "set limit_mib or limit_percentage (of the container's memory limit)",
                );
            }
            (MemoryAmount::Percentage(80), None)
        }
    };
    ProcessorConfig::MemoryLimiter(MemoryLimiterConfig {
        check_interval,
        limit,
        spike,
    })
}

/// `mib` MiB (the value of `key`) in bytes. A number of bytes that does not fit in 64
/// bits is recorded as a problem (the limiter would otherwise start with a wrapped-around
/// limit, or refuse to start).
fn mebibytes(problems: &mut Problems, fields: &Fields<'_>, key: &str, mib: u64) -> u64 {
    mib.checked_mul(MIB).unwrap_or_else(|| {
        problems.add(
            fields.key_path(key),
            format!("{mib} is too large: write the limit in MiB"),
        );
        u64::MAX
    })
}

fn percentage(problems: &mut Problems, fields: &Fields<'_>, key: &str) -> Option<u32> {
    let percent = fields.uint(problems, key).filter(|&p| p > 0)?;
    if percent > 100 {
        problems.add(
            fields.key_path(key),
            format!("must be between 1 and 100, found {percent}"),
        );
        return None;
    }
    u32::try_from(percent).ok()
}
