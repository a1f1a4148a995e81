//! The conformance suite on a RedLock over three real `redis-server` processes (the reentrant
//! lock, the only kind a RedLock keeps, and the multi-lock over it).

#![cfg(feature = "redis")]

use dlock_test_support as support;
use dlock_test_support::conformance_suite;

conformance_suite!(shared support::redis_server::RedLockEnv::start, reentrant_only);

/// The async surface on the RedLock: its steps reach three servers, on the client's threads.
#[cfg(feature = "async")]
mod async_surface {
    dlock_test_support::async_suite!(dlock_test_support::redis_server::RedLockEnv::start);
}
