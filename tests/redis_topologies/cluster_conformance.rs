//! The conformance suite on a Redis Cluster: three masters of its own per test, locks spread
//! over them by slot, waiters woken by sharded pub/sub.

#![cfg(feature = "redis")]

use dlock_test_support as support;
use dlock_test_support::conformance_suite;

conformance_suite!(shared support::cluster::ClusterEnv::start);
