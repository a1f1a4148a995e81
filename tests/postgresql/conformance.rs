//! The conformance suite on a real PostgreSQL server (one per test, started by the harness):
//! every lock kind; the synchronizers (semaphore, latch, election) are not kept on PostgreSQL
//! yet.

#![cfg(feature = "postgres")]

use dlock_test_support as support;
use dlock_test_support::conformance_suite;

conformance_suite!(support::postgres_server::PostgresEnv::start, locks_only);
