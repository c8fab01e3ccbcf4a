//! The Collector-style configuration.

mod types;

pub use types::*;
