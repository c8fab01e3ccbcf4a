//! The ring as a sampler that follows it sees it ([`Ownership`]): which traces are this
//! process's, published at every membership change.

use super::ring::Ring;
use crate::otlp::TraceId;
use crate::sampler::{Owner, Ownership};

/// The backends at one moment, and which of them is this process.
pub(super) struct Membership {
    pub(super) ring: Ring,
    /// Index into `ring.backends()` of this process's own receiver, if it is a backend.
    pub(super) local: Option<usize>,
    /// This process is leaving: it has taken itself out of the ring for good.
    pub(super) leaving: bool,
}

impl Ownership for Membership {
    fn owner(&self, trace_id: &TraceId) -> Owner {
        match self.ring.owner(trace_id) {
            None => Owner::Unknown,
            Some(owner) if Some(owner) == self.local => Owner::Here,
            Some(_) => Owner::Peer,
        }
    }

    fn leaving(&self) -> bool {
        self.leaving
    }
}
