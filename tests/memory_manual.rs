//! The conformance suite on the memory backend driven by a `ManualClock`: no test here sleeps.

mod conformance;
mod support;

conformance_suite!(support::env::ManualMemory::new);
