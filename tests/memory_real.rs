//! The conformance suite on the memory backend on the system clock.

mod conformance;
mod support;

conformance_suite!(support::env::RealMemory::new);
