//! The conformance suite through Redis Sentinel: a master with two replicas and three
//! sentinels of its own per test, every lock step acknowledged by a replica.

#![cfg(feature = "redis")]

use dlock_test_support as support;
use dlock_test_support::conformance_suite;

conformance_suite!(shared support::sentinel::SentinelEnv::start);
