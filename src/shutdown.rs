//! The staged drain protocol, run on SIGTERM or SIGINT.
//!
//! 0. Readiness fails (`health_check` answers 503). A replica whose samplers follow a
//!    ring (`tail_sampling.hand_off`) leaves it: it takes itself out of its own ring, its
//!    samplers hand their undecided traces to the new owners, and it keeps receiving and
//!    forwarding for `hand_off.leave_delay` while its peers' resolvers notice.
//! 1. The receivers stop accepting connections (traces and metrics alike); requests
//!    already admitted finish.
//! 2. When the receivers are gone, their senders are dropped, so each traces pipeline's
//!    input closes: tail samplers decide what they hold, processors flush their partial
//!    batches downstream and end. A `forward` connector's entry into the next traces
//!    pipeline is dropped when the pipeline feeding it ends, so joined pipelines drain in
//!    order, upstream first.
//! 3. When every traces pipeline feeding a `spanmetrics` connector has ended, the connector
//!    flushes its last interval into the metrics pipelines and drops its entry into them.
//! 4. Only then can the metrics pipelines' inputs close (their receivers stopped in step 1):
//!    they flush and end, so the span metrics of the last spans are exported.
//! 5. Exporters (traces and metrics) deliver what is queued until the deadline
//!    (`service.shutdown_timeout` after the signal).
//! 6. Whatever is still undelivered then is counted as dropped (reason `shutdown`) and
//!    logged once. The telemetry endpoints stop last.
//!
//! Completion is detected by drop (channel senders), so the order follows from the graph;
//! the stages are awaited in that order so that a stall is reported by stage. Every wait
//! is bounded by the one deadline. When it passes, stages are not aborted with data in
//! hand: the give-up signal is raised, every stage stops waiting for room downstream,
//! counts what it gives up (see [`crate::payload::GiveUp`]) and ends once its input
//! closes, so `tailgate_spans_dropped_total` holds exactly what was accepted and not
//! delivered. Only a stage that still has not ended [`GIVE_UP_GRACE`] later is aborted,
//! and that is logged as an error.

use std::time::Duration;

use tokio::time::Instant;

use crate::payload::GiveUpSignal;
use crate::service::Gateway;
use crate::telemetry::HealthState;
use crate::telemetry::k8s_events::{self, Transition};

/// How long stages get, after the give-up signal, to count what they hold and end before
/// they are aborted.
pub const GIVE_UP_GRACE: Duration = Duration::from_secs(2);

/// What the drain achieved.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ShutdownReport {
    /// Spans the exporters delivered during the drain.
    pub delivered_spans: u64,
    /// Spans still undelivered at the deadline, counted as dropped.
    pub dropped_spans: u64,
    /// Metric data points the exporters delivered during the drain.
    pub delivered_metric_points: u64,
    /// Metric data points still undelivered at the deadline, counted as dropped.
    pub dropped_metric_points: u64,
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
        k8s_events::record(|| Transition::Draining { timeout });
        let mut completed = true;

        // 0. A replica that follows a ring leaves it first: its peers take over what it
        //    owned, it hands off what it holds, and it keeps receiving (forwarding what
        //    still reaches it) while the peers' resolvers notice.
        if let Some(leave_delay) = self.pipelines.leave().await {
            tracing::info!(event = "shutdown.leaving", leave_delay = ?leave_delay);
            let until = (Instant::now() + leave_delay).min(deadline);
            tokio::time::sleep_until(until).await;
        }

        let stages = self.pipelines.into_parts();
        let give_up = &stages.give_up;

        // 1. Stop intake; admitted requests finish.
        let _ = self.stop_receivers.send(true);
        completed &= join_until(self.receiver_tasks, deadline, "receivers", None).await;

        // 2. Receivers are gone, so traces pipeline inputs close: processors flush and end.
        completed &= join_until(
            stages.traces_stages,
            deadline,
            "traces processors",
            Some(give_up),
        )
        .await;

        // 3. Span metrics connectors flush their last interval into the metrics pipelines.
        completed &= join_until(
            stages.connector_tasks,
            deadline,
            "connectors",
            Some(give_up),
        )
        .await;

        // 4. Metrics pipeline inputs close: processors flush and end.
        completed &= join_until(
            stages.metrics_stages,
            deadline,
            "metrics processors",
            Some(give_up),
        )
        .await;

        // 5. Exporters deliver their queues until the deadline.
        let traces_drains = stages
            .traces_exporters
            .into_iter()
            .map(|(_id, exporter)| exporter.shutdown(deadline));
        let metrics_drains = stages
            .metrics_exporters
            .into_iter()
            .map(|(_id, exporter)| exporter.shutdown(deadline));
        let (traces_drains, metrics_drains) = tokio::join!(
            futures_join_all(traces_drains),
            futures_join_all(metrics_drains)
        );
        let mut report = ShutdownReport {
            completed,
            ..ShutdownReport::default()
        };
        // What the stages gave up at the deadline; exporters report their own below.
        report.dropped_spans = stages.lost_spans.total();
        report.dropped_metric_points = stages.lost_points.total();
        for drain in traces_drains {
            report.delivered_spans += drain.delivered;
            report.dropped_spans += drain.dropped;
        }
        for drain in metrics_drains {
            report.delivered_metric_points += drain.delivered;
            report.dropped_metric_points += drain.dropped;
        }
        if report.dropped_spans > 0 || report.dropped_metric_points > 0 {
            report.completed = false;
            tracing::error!(
                event = "shutdown.data_dropped",
                dropped_spans = report.dropped_spans,
                dropped_metric_points = report.dropped_metric_points,
            );
        }
        tracing::info!(
            event = "shutdown.finished",
            delivered_spans = report.delivered_spans,
            dropped_spans = report.dropped_spans,
            delivered_metric_points = report.delivered_metric_points,
            dropped_metric_points = report.dropped_metric_points,
            completed = report.completed
        );

        // 6. Telemetry last, so the drain can be watched.
        let _ = self.stop_telemetry.send(true);
        join_until(
            self.telemetry_tasks,
            Instant::now() + Duration::from_secs(2),
            "telemetry",
            None,
        )
        .await;
        report
    }
}

/// Awaits `tasks` until `deadline`. True when all finished by then.
///
/// For pipeline stages (`give_up` set), the deadline raises the give-up signal and the
/// stages get [`GIVE_UP_GRACE`] more to count what they hold and end; what is left after
/// that (or, for other tasks, at the deadline) is aborted.
async fn join_until(
    tasks: Vec<tokio::task::JoinHandle<()>>,
    deadline: Instant,
    stage: &'static str,
    give_up: Option<&GiveUpSignal>,
) -> bool {
    let mut set = tokio::task::JoinSet::new();
    let mut handles = Vec::new();
    for task in tasks {
        handles.push(task.abort_handle());
        set.spawn(async move {
            let _ = task.await;
        });
    }
    if join_set_until(&mut set, deadline).await {
        return true;
    }
    tracing::warn!(event = "shutdown.stage_timed_out", stage);
    if let Some(give_up) = give_up {
        give_up.raise();
        let grace = Instant::now() + GIVE_UP_GRACE;
        if join_set_until(&mut set, grace).await {
            return false;
        }
        // A stage that does not end after giving up holds data no counter will see.
        tracing::error!(event = "shutdown.stage_aborted", stage);
    }
    for handle in handles {
        handle.abort();
    }
    false
}

/// Awaits every task of `set` until `deadline`. True when all finished by then.
async fn join_set_until(set: &mut tokio::task::JoinSet<()>, deadline: Instant) -> bool {
    tokio::time::timeout_at(deadline, async { while set.join_next().await.is_some() {} })
        .await
        .is_ok()
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
