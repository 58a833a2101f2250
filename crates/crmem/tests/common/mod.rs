//! Helpers shared by CRMem's integration tests.

/// The library's: a thread driving each polled node while the test's work runs.
pub use txcast_crmem::with_idle_drivers;
