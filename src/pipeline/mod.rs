//! The pipeline graph and the payload that flows along its edges.

mod payload;

pub use payload::TraceBatch;
