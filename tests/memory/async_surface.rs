//! The async surface on the in-process backend, on a manual clock and on the system clock.

#![cfg(feature = "async")]

mod manual {
    dlock_test_support::async_suite!(dlock_test_support::env::ManualMemory::new);
}

mod real {
    dlock_test_support::async_suite!(dlock_test_support::env::RealMemory::new);
}
