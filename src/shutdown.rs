//! The staged drain protocol, run on SIGTERM or SIGINT.
//!
//! 1. Readiness fails (`health_check` answers 503) and the receivers stop accepting
//!    connections; requests already admitted finish.
//! 2. When the receivers are gone, their senders are dropped, so each pipeline's input
//!    closes; processors flush their partial batches downstream and end.
//! 3. Exporters deliver what is queued until the deadline (`service.shutdown_timeout`
//!    after the signal).
//! 4. Whatever is still undelivered then is counted as dropped (reason `shutdown`) and
//!    logged once. The telemetry endpoints stop last.
//!
//! Every wait is bounded by the one deadline.

use std::time::Duration;

use tokio::time::Instant;

use crate::service::Gateway;
use crate::telemetry::HealthState;

/// What the drain achieved.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ShutdownReport {
    /// Spans the exporters delivered during the drain.
    pub delivered_spans: u64,
    /// Spans still undelivered at the deadline, counted as dropped.
    pub dropped_spans: u64,
    /// True when every stage finished before the deadline.
    pub completed: bool,
}

/// Waits for SIGTERM or SIGINT (Ctrl-C).
///
/// # Errors
///
/// When the signal handlers cannot be installed.
pub async fn wait_for_signal() -> std::io::Result<&'static str> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut terminate = signal(SignalKind::terminate())?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    Ok(tokio::select! {
        _ = terminate.recv() => "SIGTERM",
        _ = interrupt.recv() => "SIGINT",
    })
}

impl Gateway {
    /// Drains the gateway within its configured shutdown timeout; see the module docs.
    pub async fn shutdown(self) -> ShutdownReport {
        let timeout = self.shutdown_timeout;
        self.shutdown_within(timeout).await
    }

    /// Drains the gateway, giving up at `timeout` from now.
    pub async fn shutdown_within(self, timeout: Duration) -> ShutdownReport {
        let deadline = Instant::now() + timeout;
        self.health.set(HealthState::Draining);
        tracing::info!(event = "shutdown.started", timeout = ?timeout);
        let mut completed = true;

        // 1. Stop intake; admitted requests finish.
        let _ = self.stop_receivers.send(true);
        completed &= join_until(self.receiver_tasks, deadline, "receivers").await;

        // 2. Receivers are gone, so pipeline inputs close: processors flush and end.
        let (stage_tasks, exporters) = self.pipelines.into_parts();
        completed &= join_until(stage_tasks, deadline, "processors").await;

        // 3. Exporters deliver their queues until the deadline.
        let drains = exporters
            .into_iter()
            .map(|(_id, exporter)| exporter.shutdown(deadline));
        let mut report = ShutdownReport {
            completed,
            ..ShutdownReport::default()
        };
        for drain in futures_join_all(drains).await {
            report.delivered_spans += drain.delivered_spans;
            report.dropped_spans += drain.dropped_spans;
        }
        if report.dropped_spans > 0 {
            report.completed = false;
            tracing::error!(
                event = "shutdown.data_dropped",
                dropped_spans = report.dropped_spans
            );
        }
        tracing::info!(
            event = "shutdown.finished",
            delivered_spans = report.delivered_spans,
            dropped_spans = report.dropped_spans,
            completed = report.completed
        );

        // 4. Telemetry last, so the drain can be watched.
        let _ = self.stop_telemetry.send(true);
        join_until(
            self.telemetry_tasks,
            Instant::now() + Duration::from_secs(2),
            "telemetry",
        )
        .await;
        report
    }
}

/// Awaits `tasks` until `deadline`, then aborts what is left. True when all finished.
async fn join_until(
    tasks: Vec<tokio::task::JoinHandle<()>>,
    deadline: Instant,
    stage: &'static str,
) -> bool {
    let mut set = tokio::task::JoinSet::new();
    let mut handles = Vec::new();
    for task in tasks {
        handles.push(task.abort_handle());
        set.spawn(async move {
            let _ = task.await;
        });
    }
    let finished =
        tokio::time::timeout_at(deadline, async { while set.join_next().await.is_some() {} })
            .await
            .is_ok();
    if !finished {
        tracing::warn!(event = "shutdown.stage_timed_out", stage);
        for handle in handles {
            handle.abort();
        }
    }
    finished
}

/// Runs the futures concurrently and collects their outputs in order.
async fn futures_join_all<F>(futures: impl IntoIterator<Item = F>) -> Vec<F::Output>
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    let handles: Vec<_> = futures.into_iter().map(tokio::spawn).collect();
    let mut outputs = Vec::with_capacity(handles.len());
    for handle in handles {
        if let Ok(output) = handle.await {
            outputs.push(output);
        }
    }
    outputs
}
