//! Shutdown.
