//! The `forward` connector: what one pipeline exports enters the pipelines that list the
//! connector as a receiver, unchanged.

use crate::config::ComponentId;
use crate::payload::{BoxFuture, Consumer, Payload, Sink};

/// The `forward` connector. It waits for room in the pipelines it feeds rather than
/// refusing, so a full downstream pipeline pushes back on the upstream one, as an
/// exporter's full queue does.
pub struct ForwardConnector<P: Payload> {
    id: ComponentId,
    sink: Sink<P>,
}

impl<P: Payload> ForwardConnector<P> {
    /// A forward connector `id` into `sink`.
    pub fn new(id: ComponentId, sink: Sink<P>) -> Self {
        Self { id, sink }
    }
}

impl<P: Payload> Consumer<P> for ForwardConnector<P> {
    fn consume(&self, batch: P) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            let items = batch.item_count();
            if let Err(error) = self.sink.deliver(batch).await {
                // Counted as lost by the sink; a stopped pipeline is a bug in the drain
                // order, giving up is the shutdown deadline.
                tracing::warn!(
                    event = "connector.undelivered",
                    connector = %self.id,
                    items,
                    error = %error,
                );
            }
        })
    }

    /// When a pipeline it feeds reads views, the batch's views go on with it.
    fn reads_views(&self) -> bool {
        self.sink.wants_views()
    }
}
