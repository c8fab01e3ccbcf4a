//! The memory limit (DESIGN decision 2): one budget in bytes for everything the pipeline
//! holds, admission in front of the receivers, and the process RSS as a coarser second
//! guard.
//!
//! - [`MemoryBudget`] counts held bytes: requests being read, the trace buffer, batches,
//!   export queues. Above its soft limit it is under pressure, and the tail sampler decides
//!   its oldest traces early to relieve it. A [`Charge`] holds bytes of it until dropped.
//! - [`MemoryLimiter`] (from `processors.memory_limiter`) sets the budget's limits and
//!   admits requests *before receivers read their body*: [`MemoryLimiter::reserve`] takes a
//!   [`Reservation`] for what the request may come to, atomically against the soft limit,
//!   so concurrent requests cannot all pass on the same free room. The receiver resizes it
//!   as the body is read and decoded and hands it on as the batch's [`Charge`]. A request
//!   is refused, with a retryable status, while the reservation does not fit or while the
//!   RSS guard is tripped.
//! - [`MemoryLimiter::watch`] reads the process RSS every `check_interval` and moves the
//!   limiter between normal, soft and hard, with hysteresis: back to normal only once both
//!   the RSS and the budget are below 90% of the soft limit. Each change is logged once.

mod budget;
mod cgroup;
mod reservation;

pub use budget::{Charge, MemoryBudget};
pub use cgroup::{TotalSource, total_memory};
pub use reservation::Reservation;

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::time::Duration;

use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{IntGauge, IntGaugeVec, Opts, Registry};
use tokio::sync::watch;

use crate::config::{MemoryAmount, MemoryLimiterConfig};
use crate::error::PipelineError;
use crate::telemetry::k8s_events::{self, Transition};

/// The process's way to hand freed memory back to the OS; see [`set_memory_release`].
static MEMORY_RELEASE: std::sync::OnceLock<fn()> = std::sync::OnceLock::new();

/// Registers how to return freed-but-retained memory to the OS (the binary's allocator
/// knows how; the library does not pick an allocator). The limiter calls it at every check
/// while memory use is at or above the soft limit, so that the RSS it reads measures live
/// data rather than pages the allocator keeps for reuse. Later calls are ignored.
pub fn set_memory_release(release: fn()) {
    let _ = MEMORY_RELEASE.set(release);
}

/// Use must fall below this share of the soft limit to leave the soft state.
const RECOVERY_SHARE: f64 = 0.9;

/// Where the limiter stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LimiterState {
    /// Below the soft limit: requests are admitted by size.
    Normal = 0,
    /// At or above the soft limit: new data is refused; holders free memory.
    Soft = 1,
    /// At or above the hard limit: everything is refused.
    Hard = 2,
}

impl LimiterState {
    fn from_raw(raw: u8) -> Self {
        match raw {
            0 => Self::Normal,
            1 => Self::Soft,
            _ => Self::Hard,
        }
    }

    fn label(self) -> &'static str {
        match self {
            Self::Normal => "normal",
            Self::Soft => "soft",
            Self::Hard => "hard",
        }
    }
}

/// Failure to set up the limiter.
#[derive(Debug, thiserror::Error)]
pub enum LimiterError {
    /// A percentage limit was configured but no memory total could be read.
    #[error(
        "limit_percentage needs the container's memory limit, and neither the cgroup limit \
         nor /proc/meminfo could be read; set limit_mib instead"
    )]
    NoTotal,
    /// The resolved limits are unusable.
    #[error("the soft limit (limit - spike = {soft} bytes) must be above zero")]
    NoRoom {
        /// The soft limit that came out.
        soft: u64,
    },
    /// Metric registration failed (a programming error).
    #[error("registering metrics: {0}")]
    Metrics(#[from] prometheus::Error),
}

/// The limits, resolved to bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// The hard limit.
    pub hard: u64,
    /// The soft limit: hard minus spike.
    pub soft: u64,
}

impl Limits {
    /// Resolves a config against `total` bytes of memory (needed for percentages).
    ///
    /// # Errors
    ///
    /// When a percentage is configured without a total, or the soft limit is zero.
    pub fn resolve(config: &MemoryLimiterConfig, total: Option<u64>) -> Result<Self, LimiterError> {
        let bytes = |amount: MemoryAmount| match amount {
            MemoryAmount::Bytes(bytes) => Ok(bytes),
            MemoryAmount::Percentage(percent) => total
                .map(|total| total / 100 * u64::from(percent))
                .ok_or(LimiterError::NoTotal),
        };
        let hard = bytes(config.limit)?;
        let spike = match config.spike {
            Some(spike) => bytes(spike)?,
            None => hard / 5,
        };
        let soft = hard.saturating_sub(spike);
        if soft == 0 {
            return Err(LimiterError::NoRoom { soft });
        }
        Ok(Self { hard, soft })
    }
}

/// The running memory limiter; see the module docs.
pub struct MemoryLimiter {
    limits: Limits,
    budget: Arc<MemoryBudget>,
    state: AtomicU8,
    /// What the RSS held beyond the budget at the last check (runtime, buffers in flight,
    /// allocator slack): admission adds it to the budget to estimate the RSS between
    /// checks.
    overhead: AtomicU64,
    check_interval: Duration,
    metrics: LimiterMetrics,
}

struct LimiterMetrics {
    rss: IntGauge,
    state: IntGauge,
}

/// The budget's gauges, read at scrape time: every scrape sees the budget as it is then,
/// not as it was at the last RSS check.
struct BudgetCollector {
    budget: Arc<MemoryBudget>,
    used: IntGauge,
    peak: IntGauge,
}

impl Collector for BudgetCollector {
    fn desc(&self) -> Vec<&Desc> {
        let mut descs = self.used.desc();
        descs.extend(self.peak.desc());
        descs
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let gauge_value = |bytes: usize| i64::try_from(bytes).unwrap_or(i64::MAX);
        self.used.set(gauge_value(self.budget.used()));
        self.peak.set(gauge_value(self.budget.peak()));
        let mut families = self.used.collect();
        families.extend(self.peak.collect());
        families
    }
}

impl MemoryLimiter {
    /// A limiter for `config`, its percentages resolved against the container's memory,
    /// registering its gauges in `registry`.
    ///
    /// # Errors
    ///
    /// See [`Limits::resolve`].
    pub fn start(
        config: &MemoryLimiterConfig,
        registry: &Registry,
    ) -> Result<Arc<Self>, LimiterError> {
        let total = total_memory();
        let limits = Limits::resolve(config, total.map(|(bytes, _)| bytes))?;
        tracing::info!(
            event = "memory_limiter.started",
            hard_limit_bytes = limits.hard,
            soft_limit_bytes = limits.soft,
            total_bytes = total.map(|(bytes, _)| bytes),
            total_source = ?total.map(|(_, source)| source),
        );
        Self::with_limits(limits, config.check_interval, registry)
    }

    /// A limiter with limits already in bytes.
    ///
    /// # Errors
    ///
    /// When the gauges cannot be registered.
    pub fn with_limits(
        limits: Limits,
        check_interval: Duration,
        registry: &Registry,
    ) -> Result<Arc<Self>, LimiterError> {
        let to_usize = |bytes: u64| usize::try_from(bytes).unwrap_or(usize::MAX);
        let budget = MemoryBudget::new(to_usize(limits.hard), to_usize(limits.soft));
        let limit = IntGaugeVec::new(
            Opts::new(
                "tailgate_memory_budget_limit_bytes",
                "The memory budget's limits in bytes: hard (limit) and soft (limit - spike).",
            ),
            &["limit"],
        )?;
        let gauge = |name: &str, help: &str| IntGauge::with_opts(Opts::new(name, help));
        let budget_gauges = BudgetCollector {
            budget: budget.clone(),
            used: gauge(
                "tailgate_memory_budget_used_bytes",
                "Bytes charged to the memory budget: reserved for requests being read and \
                 held by the pipeline.",
            )?,
            peak: gauge(
                "tailgate_memory_budget_peak_bytes",
                "The most bytes charged to the memory budget at any one time since start.",
            )?,
        };
        let metrics = LimiterMetrics {
            rss: gauge(
                "tailgate_memory_limiter_rss_bytes",
                "Process RSS as last read by the memory limiter.",
            )?,
            state: gauge(
                "tailgate_memory_limiter_state",
                "0 normal, 1 soft (new data refused), 2 hard (everything refused).",
            )?,
        };
        limit
            .with_label_values(&["hard"])
            .set(i64::try_from(limits.hard).unwrap_or(i64::MAX));
        limit
            .with_label_values(&["soft"])
            .set(i64::try_from(limits.soft).unwrap_or(i64::MAX));
        registry.register(Box::new(limit))?;
        registry.register(Box::new(budget_gauges))?;
        registry.register(Box::new(metrics.rss.clone()))?;
        registry.register(Box::new(metrics.state.clone()))?;
        Ok(Arc::new(Self {
            limits,
            budget,
            state: AtomicU8::new(LimiterState::Normal as u8),
            overhead: AtomicU64::new(0),
            check_interval,
            metrics,
        }))
    }

    /// The budget every holder charges.
    pub fn budget(&self) -> &Arc<MemoryBudget> {
        &self.budget
    }

    /// The resolved limits.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// The current state.
    pub fn state(&self) -> LimiterState {
        LimiterState::from_raw(self.state.load(Ordering::Relaxed))
    }

    /// Admission, before a request body is read: reserves `bytes` of the budget, what the
    /// request is known to need (a gRPC message's declared length, an HTTP body's
    /// `Content-Length`). See [`Reservation`] for when the bytes are released.
    ///
    /// # Errors
    ///
    /// [`PipelineError::ExceedsMemoryLimit`] (not retryable) when `bytes` alone is above
    /// the soft limit: the request could never be admitted. [`PipelineError::Overloaded`]
    /// (retryable; nothing is reserved) when the limiter is in the soft or hard state, or
    /// the reservation would take the budget past the soft limit, or would take the
    /// estimated RSS (the budget plus what the RSS held beyond it at the last check) past
    /// it.
    pub fn reserve(&self, bytes: usize) -> Result<Reservation, PipelineError> {
        self.reserve_between(bytes, bytes)
    }

    /// [`reserve`](Self::reserve) for a request whose need is only bounded: at least
    /// `least` bytes (refused for good above the soft limit), at most `most` (a body of
    /// undeclared length, a compressed message). It reserves `most`, or as much as could
    /// ever be reserved when that is less: the request is then admitted once the budget is
    /// empty enough, rather than refused retryably forever, and its reservation is resized
    /// to what it really needs as it is read.
    ///
    /// # Errors
    ///
    /// As [`reserve`](Self::reserve), for `least`.
    pub fn reserve_between(&self, least: usize, most: usize) -> Result<Reservation, PipelineError> {
        let refuse = reservation::overloaded;
        let soft = self.budget.soft_limit();
        if least > soft {
            return Err(PipelineError::ExceedsMemoryLimit {
                needed: least,
                limit: soft,
            });
        }
        match self.state() {
            LimiterState::Hard => return Err(refuse("memory use above the hard limit")),
            LimiterState::Soft => return Err(refuse("memory use above the soft limit")),
            LimiterState::Normal => {}
        }
        // The RSS now is about what it was at the last check, moved by what the budget
        // gained since: refuse before the next check would find it past the soft limit.
        let overhead = usize::try_from(self.overhead.load(Ordering::Relaxed)).unwrap_or(usize::MAX);
        let ceiling = soft.saturating_sub(overhead);
        let bytes = most.min(ceiling).max(least);
        Reservation::try_take(&self.budget, bytes, ceiling).ok_or_else(|| {
            if self.budget.used().saturating_add(bytes) > soft {
                refuse("memory budget full")
            } else {
                refuse("memory use near the soft limit")
            }
        })
    }

    /// Reads the RSS every `check_interval` and updates the state until `stop`.
    pub async fn watch(self: Arc<Self>, mut stop: watch::Receiver<bool>) {
        let mut ticker = tokio::time::interval(self.check_interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = ticker.tick() => {}
                _ = stop.wait_for(|stopped| *stopped) => return,
            }
            self.check();
        }
    }

    /// Reads the RSS; at or above the soft limit, hands retained memory back to the OS
    /// first and reads again, so that pages the allocator merely keeps for reuse neither
    /// count against the limit nor trip refusals. Then moves the state.
    fn check(&self) {
        let mut rss = crate::telemetry::rss_bytes().unwrap_or(0);
        if rss >= self.limits.soft
            && let Some(release) = MEMORY_RELEASE.get()
        {
            release();
            rss = crate::telemetry::rss_bytes().unwrap_or(rss);
        }
        self.observe(rss);
    }

    /// Moves the state for a reading of `rss` bytes and the budget's use.
    pub fn observe(&self, rss: u64) {
        let used = self.budget.used() as u64;
        self.overhead
            .store(rss.saturating_sub(used), Ordering::Relaxed);
        let highest = rss.max(used);
        let before = self.state();
        let recovered = (self.limits.soft as f64 * RECOVERY_SHARE) as u64;
        // Once refusing, stay so until use is clearly below the soft limit.
        let soft_from = if before == LimiterState::Normal {
            self.limits.soft
        } else {
            recovered
        };
        let after = if highest >= self.limits.hard {
            LimiterState::Hard
        } else if highest >= soft_from {
            LimiterState::Soft
        } else {
            LimiterState::Normal
        };
        self.state.store(after as u8, Ordering::Relaxed);
        self.metrics.rss.set(i64::try_from(rss).unwrap_or(i64::MAX));
        self.metrics.state.set(after as i64);
        if after != before {
            // One event at two levels (a `tracing` level is fixed per call site): entering
            // pressure warns and names the limits, recovering is informational.
            macro_rules! state_changed {
                ($level:ident $(, $limit:ident = $value:expr)*) => {
                    tracing::$level!(
                        event = "memory_limiter.state_changed",
                        from = before.label(),
                        to = after.label(),
                        rss_bytes = rss,
                        budget_used_bytes = used,
                        $($limit = $value,)*
                    )
                };
            }
            // Events mark leaving and re-entering the normal state; soft <-> hard moves
            // are logged only.
            if before == LimiterState::Normal || after == LimiterState::Normal {
                k8s_events::record(|| match after {
                    LimiterState::Normal => Transition::MemoryPressureRelieved {
                        rss_bytes: rss,
                        used_bytes: used,
                    },
                    _ => Transition::MemoryLimitReached {
                        state: after.label(),
                        rss_bytes: rss,
                        used_bytes: used,
                        soft_limit_bytes: self.limits.soft,
                        hard_limit_bytes: self.limits.hard,
                    },
                });
            }
            if after == LimiterState::Normal {
                state_changed!(info);
            } else {
                state_changed!(
                    warn,
                    soft_limit_bytes = self.limits.soft,
                    hard_limit_bytes = self.limits.hard
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A limiter with the given limits in bytes, on a fresh registry; shared with the
    /// other test modules under `limiter`.
    pub(super) fn limiter(hard: u64, soft: u64) -> Arc<MemoryLimiter> {
        MemoryLimiter::with_limits(
            Limits { hard, soft },
            Duration::from_secs(1),
            &Registry::new(),
        )
        .expect("fresh registry")
    }

    /// Scenario: limits from MiB and from percentages, with and without a spike.
    /// Guarantees: the Collector's arithmetic (soft = limit - spike, spike 20% by default);
    /// a percentage without a known total is an error naming the fix.
    #[test]
    fn resolves_limits() {
        let config = |limit, spike| MemoryLimiterConfig {
            check_interval: Duration::from_secs(1),
            limit,
            spike,
        };
        let mib = 1 << 20;
        assert_eq!(
            Limits::resolve(&config(MemoryAmount::Bytes(100 * mib), None), None).expect("mib"),
            Limits {
                hard: 100 * mib,
                soft: 80 * mib
            }
        );
        assert_eq!(
            Limits::resolve(
                &config(
                    MemoryAmount::Percentage(80),
                    Some(MemoryAmount::Percentage(20))
                ),
                Some(1000 * mib)
            )
            .expect("percent"),
            Limits {
                hard: 800 * mib,
                soft: 600 * mib
            }
        );
        let error = Limits::resolve(&config(MemoryAmount::Percentage(80), None), None)
            .expect_err("no total");
        assert!(error.to_string().contains("limit_mib"));
    }

    /// Scenario: the RSS rises past the soft limit, past the hard limit, then falls.
    /// Guarantees: refusals start at the soft limit, everything is refused at the hard
    /// limit, and admission resumes only below 90% of the soft limit (hysteresis).
    #[test]
    fn moves_between_states_with_hysteresis() {
        let limiter = limiter(1000, 800);
        limiter.observe(500);
        assert_eq!(limiter.state(), LimiterState::Normal);
        assert!(limiter.reserve(100).is_ok());
        limiter.observe(850);
        assert_eq!(limiter.state(), LimiterState::Soft);
        assert!(limiter.reserve(0).is_err());
        limiter.observe(1200);
        assert_eq!(limiter.state(), LimiterState::Hard);
        limiter.observe(750);
        assert_eq!(
            limiter.state(),
            LimiterState::Soft,
            "not yet below 90% of soft"
        );
        limiter.observe(700);
        assert_eq!(limiter.state(), LimiterState::Normal);
        assert!(limiter.reserve(0).is_ok());
    }

    /// Scenario: the last RSS reading shows 500 bytes beyond what the budget holds, then
    /// the budget grows.
    /// Guarantees: admission estimates the RSS as budget + that overhead and refuses
    /// before the next reading would find the soft limit passed.
    #[test]
    fn admission_estimates_rss_between_checks() {
        let limiter = limiter(1000, 800);
        limiter.budget().charge(100);
        limiter.observe(600);
        assert_eq!(limiter.state(), LimiterState::Normal);
        assert!(
            limiter.reserve(100).is_ok(),
            "100 + 100 + 500 overhead fits under 800"
        );
        limiter.budget().charge(150);
        assert!(
            limiter.reserve(100).is_err(),
            "250 + 100 + 500 overhead would pass 800"
        );
    }

    /// Scenario: the budget is nearly full when a request arrives.
    /// Guarantees: a request that would take the budget past its soft limit is refused
    /// retryably; a smaller one is admitted.
    #[test]
    fn admits_by_request_size() {
        let limiter = limiter(1000, 800);
        limiter.budget().charge(700);
        let refused = limiter.reserve(200).expect_err("would pass the soft limit");
        assert!(refused.is_retryable());
        assert!(limiter.reserve(50).is_ok());
    }
}
