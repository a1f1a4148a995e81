//! The conformance suite on a real PostgreSQL server (one per test, started by the harness):
//! every lock kind and every synchronizer (semaphore, latch, election).

#![cfg(feature = "postgres")]

use dlock_test_support as support;
use dlock_test_support::conformance_suite;

conformance_suite!(support::postgres_server::PostgresEnv::start);
