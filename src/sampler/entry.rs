//! The sampler as a directly fed pipeline entry: receivers write into its buffer on their
//! own task, with no queue in between (the buffer is the queue).

use super::SamplerIngest;
use crate::error::PipelineError;
use crate::payload::{DirectEntry, Payload, TraceBatch};

impl DirectEntry<TraceBatch> for SamplerIngest {
    fn check_room(&self) -> Result<(), PipelineError> {
        SamplerIngest::check_room(self)
    }

    fn take(
        &self,
        batch: &TraceBatch,
        views: Option<&<TraceBatch as Payload>::Views>,
    ) -> Result<(), PipelineError> {
        match views {
            Some(resources) => {
                self.ingest_parsed(resources);
                Ok(())
            }
            None => self.ingest(batch),
        }
    }
}
