//! One tier: backends that are this process.
//!
//! A backend whose `ip:port` is the bound address of one of this process's OTLP/gRPC
//! receivers is this process: what it owns skips the network and is admitted into that
//! receiver's pipelines in-process, as the receiver itself would admit it (all pipelines or
//! none, hand-offs marked). The receivers are attached once bound
//! (`LoadBalancer::attach_local`).
//!
//! A local receiver's sink keeps its pipelines open (their entries close when every sink
//! feeding them is gone), so the load balancer lets go of it when the pipelines that export
//! to it have ended, as a `forward` connector does: [`UpstreamInput`], the consumer those
//! pipelines hold, releases the local receivers when the last of it is dropped.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use crate::error::PipelineError;
use crate::exporter::TracesExporter;
use crate::payload::{Arrival, BoxFuture, Consumer, TraceBatch, TracesSink};

/// How long local delivery waits before asking a full pipeline again.
const LOCAL_RETRY: Duration = Duration::from_millis(20);

/// The receivers of this process that may be backends, by bound address.
pub(super) struct LocalReceivers {
    /// `None` once released: the pipelines that export to the load balancer have ended.
    sinks: Mutex<Option<BTreeMap<SocketAddr, TracesSink>>>,
}

impl Default for LocalReceivers {
    /// None attached yet, not released.
    fn default() -> Self {
        Self {
            sinks: Mutex::new(Some(BTreeMap::new())),
        }
    }
}

/// Why local delivery did not happen.
#[derive(Debug)]
pub(super) enum LocalRefused {
    /// The receiver's pipelines have stopped, or the load balancer let go of them.
    Stopped,
}

impl LocalReceivers {
    fn lock(&self) -> MutexGuard<'_, Option<BTreeMap<SocketAddr, TracesSink>>> {
        // Every mutation is a whole insert or take.
        self.sinks.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Makes `receivers` local backends (unless already released).
    pub(super) fn attach(&self, receivers: Vec<(SocketAddr, TracesSink)>) {
        let mut sinks = self.lock();
        if let Some(sinks) = sinks.as_mut() {
            sinks.extend(receivers);
        } else if !receivers.is_empty() {
            // Attached after release only if the pipelines ended before the gateway
            // started: nothing will be routed.
            tracing::debug!(event = "exporter.loadbalancing.local_attach_after_release");
        }
    }

    /// Drops every local receiver's sink, so that their pipelines can close.
    pub(super) fn release(&self) {
        *self.lock() = None;
    }

    /// Whether `address` (`host:port`) is one of the local receivers.
    pub(super) fn is_local(&self, address: &str) -> Option<SocketAddr> {
        let address: SocketAddr = address.parse().ok()?;
        let sinks = self.lock();
        sinks
            .as_ref()
            .filter(|sinks| sinks.contains_key(&address))
            .map(|_| address)
    }

    /// Admits `batch` into the pipelines of the receiver at `address`, waiting while they
    /// are full.
    ///
    /// # Errors
    ///
    /// [`LocalRefused::Stopped`] when the receiver's pipelines have stopped or were let go.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the batch is admitted whole or not at all.
    pub(super) async fn deliver(
        &self,
        address: SocketAddr,
        batch: TraceBatch,
        arrival: Arrival,
    ) -> Result<(), LocalRefused> {
        loop {
            let sink = self.lock().as_ref().and_then(|s| s.get(&address).cloned());
            let Some(sink) = sink else {
                return Err(LocalRefused::Stopped);
            };
            match sink.accept_with_views(batch.clone(), None, arrival).await {
                Ok(()) => return Ok(()),
                Err(PipelineError::Overloaded { .. }) => tokio::time::sleep(LOCAL_RETRY).await,
                Err(_) => return Err(LocalRefused::Stopped),
            }
        }
    }
}

/// The consumer that the pipelines exporting to a load balancer hold: exports through it,
/// and releases the local receivers when the last pipeline holding it has ended.
pub struct UpstreamInput {
    exporter: TracesExporter,
    local: Weak<LocalReceivers>,
}

impl UpstreamInput {
    /// The consumer for the pipelines that export through `exporter` (a load balancer's
    /// handle) to a load balancer whose local receivers are `local`.
    pub(super) fn new(local: &Arc<LocalReceivers>, exporter: TracesExporter) -> Self {
        Self {
            exporter,
            local: Arc::downgrade(local),
        }
    }
}

impl Consumer<TraceBatch> for UpstreamInput {
    fn consume(&self, batch: TraceBatch) -> BoxFuture<'_, ()> {
        self.exporter.consume(batch)
    }

    /// The load balancer routes by the views a batch carries, and a batch it delivers
    /// whole to a local receiver keeps them for the sampler there.
    fn reads_views(&self) -> bool {
        true
    }
}

impl Drop for UpstreamInput {
    fn drop(&mut self) {
        if let Some(local) = self.local.upgrade() {
            local.release();
        }
    }
}
