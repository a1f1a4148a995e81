//! The in-process dlock backend: real leases and expiry in a sharded map, driven by the system
//! clock or by a [`ManualClock`] that a test advances, so tests of code that takes locks are
//! deterministic and never sleep.

mod manual_clock;
mod memory_backend;

pub use manual_clock::ManualClock;
pub use memory_backend::MemoryBackend;
