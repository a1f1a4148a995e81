//! The conformance suite on a real PostgreSQL server (one per test, started by the harness):
//! every lock kind; the synchronizers (semaphore, latch, election) are not kept on PostgreSQL
//! yet.

#![cfg(feature = "postgres")]

mod conformance;
mod support;

conformance_suite!(support::postgres_server::PostgresEnv::start, locks_only);
