//! Export-core tests on paused time, with scripted in-memory transports.
