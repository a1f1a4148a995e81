//! The conformance suite on the memory backend on the system clock.

use dlock_test_support as support;
use dlock_test_support::conformance_suite;

conformance_suite!(support::env::RealMemory::new);
