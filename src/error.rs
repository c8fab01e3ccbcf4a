//! Pipeline errors.
