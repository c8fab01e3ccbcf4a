//! The limit on export requests in flight per receiver and protocol
//! (`max_concurrent_requests`).

use std::num::NonZeroUsize;
use std::sync::Arc;

use prometheus::IntGauge;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::error::{PipelineError, RETRY_AFTER};

/// Requests in flight on one receiver's server (gRPC or HTTP), over all its connections.
///
/// A request takes a permit before admission (before its body is read or memory is
/// reserved for it) and holds it until its answer is ready. Over the limit a request is
/// shed at once rather than queued: waiting would keep the client's connection and request
/// open anyway, while an immediate retryable refusal (with `Retry-After` / `RetryInfo`)
/// lets the client back off or try another replica.
#[derive(Clone, Debug)]
pub(super) struct InFlightLimit {
    /// `None` when unlimited: requests are only counted.
    permits: Option<Arc<Semaphore>>,
    gauge: IntGauge,
}

impl InFlightLimit {
    /// A limit of `limit` requests (`None`: unlimited), reporting its use on `gauge`.
    pub(super) fn new(limit: Option<NonZeroUsize>, gauge: IntGauge) -> Self {
        Self {
            permits: limit
                .map(|limit| Arc::new(Semaphore::new(limit.get().min(Semaphore::MAX_PERMITS)))),
            gauge,
        }
    }

    /// Takes a slot for one request; the slot is freed when the permit is dropped.
    ///
    /// # Errors
    ///
    /// [`PipelineError::Overloaded`] (retryable) when every slot is taken. The caller
    /// counts it as `too_many_requests`.
    pub(super) fn try_acquire(&self) -> Result<InFlightPermit, PipelineError> {
        let permit = match &self.permits {
            Some(permits) => Some(permits.clone().try_acquire_owned().map_err(|_| {
                PipelineError::Overloaded {
                    reason: "too many requests in flight",
                    retry_after: RETRY_AFTER,
                }
            })?),
            None => None,
        };
        self.gauge.inc();
        Ok(InFlightPermit {
            _permit: permit,
            gauge: self.gauge.clone(),
        })
    }
}

/// One request's slot in an [`InFlightLimit`], freed on drop.
#[derive(Debug)]
pub(super) struct InFlightPermit {
    _permit: Option<OwnedSemaphorePermit>,
    gauge: IntGauge,
}

impl Drop for InFlightPermit {
    fn drop(&mut self) {
        self.gauge.dec();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Scenario: a limit of 2; three requests arrive, then one finishes and a fourth comes.
    /// Guarantees: the third is refused retryably, the fourth takes the freed slot, and the
    /// gauge follows the requests held; an unlimited limit never refuses.
    #[test]
    fn sheds_over_the_limit_and_frees_on_drop() {
        let gauge = IntGauge::new("in_flight", "test").expect("valid");
        let limit = InFlightLimit::new(NonZeroUsize::new(2), gauge.clone());
        let first = limit.try_acquire().expect("room");
        let _second = limit.try_acquire().expect("room");
        let refused = limit.try_acquire().expect_err("full");
        assert!(refused.is_retryable());
        assert_eq!(gauge.get(), 2);
        drop(first);
        assert_eq!(gauge.get(), 1);
        let _fourth = limit.try_acquire().expect("a slot was freed");
        assert_eq!(gauge.get(), 2);

        let unlimited = InFlightLimit::new(None, IntGauge::new("u", "test").expect("valid"));
        let held: Vec<_> = (0..10_000)
            .map(|_| unlimited.try_acquire().expect("no limit"))
            .collect();
        assert_eq!(held.len(), 10_000);
    }
}
