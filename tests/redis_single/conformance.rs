//! The conformance suite on a real `redis-server` (one per test, started by the harness).

#![cfg(feature = "redis")]

use dlock_test_support as support;
use dlock_test_support::conformance_suite;

conformance_suite!(support::redis_server::RedisEnv::start);
