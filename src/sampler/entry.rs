//! The sampler as a directly fed pipeline entry: receivers write into its buffer on their
//! own task, with no queue in between (the buffer is the queue).

use std::borrow::Cow;

use super::SamplerIngest;
use crate::error::PipelineError;
use crate::payload::{Arrival, DirectEntry, Payload, TraceBatch};

impl DirectEntry<TraceBatch> for SamplerIngest {
    fn check_room(&self) -> Result<(), PipelineError> {
        SamplerIngest::check_room(self)
    }

    fn take(
        &self,
        batch: &TraceBatch,
        views: Option<&<TraceBatch as Payload>::Views>,
        arrival: Arrival,
    ) -> Result<(), PipelineError> {
        let resources = match views {
            Some(views) => Cow::Borrowed(views.as_slice()),
            None => batch
                .views()
                .map_err(|error| PipelineError::Malformed(error.to_string()))?,
        };
        self.sampler().ingest_arrival(&resources, arrival);
        Ok(())
    }
}
